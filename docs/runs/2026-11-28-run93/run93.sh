#!/bin/bash
# Run 93 (4 GPUs): main 96cecaf (WithLLTwoBcastMax), run 92's PTX. Collectives GPU tests (subset), broadcast 4 and 3 ranks, copy-engine limit at 4 ranks.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 NVLS_ENABLE=0 NVLS_TRANSPORT=unicast
export BUDGET=560
source scripts/device-batch.sh
nvidia-smi -L > $OUT/machine.txt; nvidia-smi --query-gpu=driver_version --format=csv,noheader | head -1 >> $OUT/machine.txt
B=BINS=.devbin/bins.txz
pr() {
python3 - "$@" <<'PY'
import json,sys
for f in sys.argv[1:]:
  print(f.split('/')[-1])
  for r in json.load(open(f))['results']:
    s=[]
    for pl in ['out_of_place','in_place']:
      n=r[pl]['rank_times_us']; m=r['nccl_'+pl]['rank_times_us']
      s.append("%s %.2f w%d nccl %.2f r %.2f"%(pl[:3],max(n),r[pl]['wrong'],min(m),min(m)/max(n)))
    print("%-14s %10d  %s"%(r.get('collective',''),r['size'],"   ".join(s)))
PY
}
dr bc4 4 $B STEPS=variants VARIANT_COLLS=broadcast VARIANT_MINBYTES=128K VARIANT_MAXBYTES=2M VARIANT_FACTOR=2 VARIANT_ARGS="-n 200" VARIANTS="def: off:NVLS_LL_TWO_BCAST_MAX=0 2m:NVLS_LL_TWO_BCAST_MAX=2M"
pr $OUT/bc4/variant-*.json
dr bc3 3 $B CUDA_VISIBLE_DEVICES=0,1,2 STEPS=variants VARIANT_COLLS=broadcast VARIANT_MINBYTES=8 VARIANT_MAXBYTES=2M VARIANT_FACTOR=4 VARIANT_ARGS="-n 200" VARIANTS="def: off:NVLS_LL_TWO_BCAST_MAX=0"
pr $OUT/bc3/variant-*.json
dr ce 4 $B STEPS=variants VARIANT_COLLS="allgather allreduce" VARIANT_MINBYTES=64M VARIANT_MAXBYTES=512M VARIANT_FACTOR=2 VARIANT_ARGS="-n 20" VARIANTS="def: 64m:NVLS_CE_MIN=64M"
pr $OUT/ce/variant-*.json
dr t 4 $B STEPS=collectives COLLECTIVES_RUN='TestGPUBroadcast|TestGPUCollsMatrix|TestGPUReadme|TestGPULaunchFromCaller' COLLECTIVES_LIMIT=300
grep -cE "^\s*--- PASS" $OUT/t.log; grep -E "^\s*--- FAIL|^FAIL|^ok" $OUT/t.log | head -20
batch_pack $(for d in bc4 bc3 ce t; do [ -d $OUT/$d ] && echo $d; done)
