#!/bin/bash
# Run 90 (4 GPUs): main with the LL broadcast. Broadcast LL on/off; copy-engine limits at 4 ranks; -n 200 points; GPU tests.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 NVLS_ENABLE=0 NVLS_TRANSPORT=unicast
export BUDGET=560
source scripts/device-batch.sh
nvidia-smi -L > $OUT/machine.txt; nvidia-smi --query-gpu=driver_version --format=csv,noheader | head -1 >> $OUT/machine.txt
B=BINS=.devbin/bins.txz
pr() { python3 - "$@" <<'PY'
import json,sys
for f in sys.argv[1:]:
  print("==",f.split('/')[-1])
  for r in json.load(open(f))['results']:
    s=[]
    for pl in ['out_of_place','in_place']:
      n=r[pl]['rank_times_us']; m=r['nccl_'+pl]['rank_times_us']
      s.append("%s %.2f nccl %.2f-%.2f r %.2f"%(pl[:3],max(n),min(m),max(m),min(m)/max(n)))
    print("%10d  %s"%(r['size'],"   ".join(s)))
PY
}
dr bc 4 $B STEPS=variants VARIANT_COLLS=broadcast VARIANT_MINBYTES=8 VARIANT_MAXBYTES=1M VARIANT_FACTOR=4 VARIANT_ARGS="-n 200" VARIANTS="ll: nol:NVLS_LL_MAX=0"
pr $OUT/bc/variant-*.json
dr ce 4 $B STEPS=variants VARIANT_COLLS="allreduce" VARIANT_MINBYTES=256M VARIANT_MAXBYTES=512M VARIANT_FACTOR=2 VARIANT_ARGS="-n 20" VARIANTS="base:"
dr ag 4 $B STEPS=variants VARIANT_COLLS="allgather" VARIANT_MINBYTES=128M VARIANT_MAXBYTES=512M VARIANT_FACTOR=2 VARIANT_ARGS="-n 20" VARIANTS="base: ce32:NVLS_CE_MIN=32M ce64:NVLS_CE_MIN=64M"
pr $OUT/ce/variant-*.json $OUT/ag/variant-*.json
dr nb 4 $B STEPS=variants VARIANT_COLLS="reducescatter allreduce" VARIANT_MINBYTES=4K VARIANT_MAXBYTES=16M VARIANT_FACTOR=4 VARIANT_ARGS="-n 200 -d bf16" VARIANTS="bf:"
python3 scripts/ratios.py $OUT/nb/variant-*.json
dr t 4 $B STEPS="kernels collectives" SOAK_FOR=15s KERNELS_LIMIT=130 COLLECTIVES_LIMIT=240
batch_pack $(for d in bc ce ag nb t; do [ -d $OUT/$d ] && echo $d; done)
