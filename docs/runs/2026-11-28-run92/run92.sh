#!/bin/bash
# Run 92 (4 GPUs): exp/llbcast2 with the one-step fix. ptx; broadcast 8 B - 1 MiB; GPU tests on the new PTX.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 NVLS_ENABLE=0 NVLS_TRANSPORT=unicast
export BUDGET=365
source scripts/device-batch.sh
nvidia-smi -L > $OUT/machine.txt; nvidia-smi --query-gpu=driver_version --format=csv,noheader | head -1 >> $OUT/machine.txt
B=BINS=.devbin/bins.txz
P=NVLS_PTX_DIR=/tmp/device-run-ptx/ptx
dr px 4 $B STEPS=ptx
[ -d /tmp/device-run-ptx/ptx ] || { echo "no PTX: stop"; batch_pack px; exit 0; }
dr bc 4 $B $P STEPS=variants VARIANT_COLLS=broadcast VARIANT_MINBYTES=8 VARIANT_MAXBYTES=1M VARIANT_FACTOR=4 VARIANT_ARGS="-n 200" VARIANTS="fix:"
python3 - $OUT/bc/variant-*.json <<'PY'
import json,sys
for f in sys.argv[1:]:
  for r in json.load(open(f))['results']:
    s=[]
    for pl in ['out_of_place','in_place']:
      n=r[pl]['rank_times_us']; m=r['nccl_'+pl]['rank_times_us']
      s.append("%s %.2f w%d nccl %.2f r %.2f"%(pl[:3],max(n),r[pl]['wrong'],min(m),min(m)/max(n)))
    print("%10d  %s"%(r['size'],"   ".join(s)))
PY
dr t 4 $B $P STEPS="kernels collectives" SOAK_FOR=10s KERNELS_LIMIT=115 COLLECTIVES_LIMIT=300
batch_pack $(for d in px bc t; do [ -d $OUT/$d ] && echo $d; done)
