#!/bin/bash
# Run 91 (4 GPUs): exp/llbcast2 (the broadcast in two LL steps). ptx; broadcast 128 KiB - 1 MiB three ways; 8 B - 128 KiB; GPU tests.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 NVLS_ENABLE=0 NVLS_TRANSPORT=unicast
export BUDGET=555
source scripts/device-batch.sh
nvidia-smi -L > $OUT/machine.txt; nvidia-smi --query-gpu=driver_version --format=csv,noheader | head -1 >> $OUT/machine.txt
B=BINS=.devbin/bins.txz
P=NVLS_PTX_DIR=/tmp/device-run-ptx/ptx
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
dr px 4 $B STEPS=ptx
[ -d /tmp/device-run-ptx/ptx ] || { echo "no PTX: stop"; batch_pack px; exit 0; }
dr bt 4 $B $P STEPS=variants VARIANT_COLLS=broadcast VARIANT_MINBYTES=128K VARIANT_MAXBYTES=1M VARIANT_FACTOR=2 VARIANT_ARGS="-n 200" VARIANTS="two: t1m:NVLS_LL_TWO_MAX=1M,NVLS_LL_MAX=384K bar:NVLS_LL_TWO_MAX=0"
pr $OUT/bt/variant-*.json
dr bs 4 $B $P STEPS=variants VARIANT_COLLS=broadcast VARIANT_MINBYTES=8 VARIANT_MAXBYTES=128K VARIANT_FACTOR=4 VARIANT_ARGS="-n 200" VARIANTS="ll:"
pr $OUT/bs/variant-*.json
dr t 4 $B $P STEPS="kernels collectives" SOAK_FOR=15s KERNELS_LIMIT=130 COLLECTIVES_LIMIT=280
batch_pack $(for d in px bt bs t; do [ -d $OUT/$d ] && echo $d; done)
