#!/bin/bash
# Run 89 (2 GPUs): exp/llbcast. ptx; the broadcast LL on/off 8 B - 1 MiB on the new PTX; kernels and collectives GPU tests on it.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 NVLS_ENABLE=0 NVLS_TRANSPORT=unicast
export BUDGET=440
source scripts/device-batch.sh
nvidia-smi -L > $OUT/machine.txt; nvidia-smi --query-gpu=driver_version --format=csv,noheader | head -1 >> $OUT/machine.txt
B=BINS=.devbin/bins-llbcast.txz
P=NVLS_PTX_DIR=/tmp/device-run-ptx/ptx
dr px 2 $B STEPS=ptx
[ -d /tmp/device-run-ptx/ptx ] || { echo "no PTX: stop"; batch_pack px; exit 0; }
dr bc 2 $B $P STEPS=variants VARIANT_COLLS=broadcast VARIANT_MINBYTES=8 VARIANT_MAXBYTES=1M VARIANT_FACTOR=4 VARIANT_ARGS="-n 200" VARIANTS="ll: nol:NVLS_LL_MAX=0"
python3 scripts/ratios.py $OUT/bc/variant-*.json
python3 - $OUT/bc/variant-*.json <<'PY'
import json,sys
for f in sys.argv[1:]:
  print("==",f.split('/')[-1])
  for r in json.load(open(f))['results']:
    for pl in ['out_of_place','in_place']:
      n=r[pl]['rank_times_us']; m=r['nccl_'+pl]['rank_times_us']
      print("%8d %s nvls %s nccl %s vs-nccl-fast %.2f"%(r['size'],pl[:3],' '.join('%.2f'%x for x in n),' '.join('%.2f'%x for x in m),min(m)/max(n)))
PY
dr t 2 $B $P STEPS="kernels collectives" SOAK_FOR=15s KERNELS_LIMIT=150 COLLECTIVES_LIMIT=220
batch_pack $(for d in px bc t; do [ -d $OUT/$d ] && echo $d; done)
