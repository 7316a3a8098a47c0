#!/bin/bash
# Run 129 (2 GPUs): branch exp/bf16loop (uc_load_reduce's sum stops at nranks). ptx; the one-pass loop's SASS; the all-reduce f32 and bf16 1-64 MiB with main's PTX against the branch's, 2 ranks (mpirun) and 4 ranks sharing GPU 0; the kernels and collectives GPU tests with 2 GPUs on the branch's PTX.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 NVLS_ENABLE=0 NVLS_TRANSPORT=unicast
export BUDGET=540
source scripts/device-batch.sh
nvidia-smi -L > $OUT/machine.txt; nvidia-smi --query-gpu=driver_version --format=csv,noheader | head -1 >> $OUT/machine.txt
B=BINS=.devbin/bins.txz
dr m 2 $B STEPS=ptx
grep -A1 "allreduce_uc\|reduce_uc\|reducescatter_uc" $OUT/m/ptx.log | head -8
P=/tmp/device-run-ptx/ptx
for k in f32 bf16; do
  ptxas -arch=sm_90 -O3 $P/allreduce_uc.ptx -o /tmp/new.cubin && cuobjdump -sass /tmp/new.cubin | awk -v k="nvls_allreduce_twoshot_${k}_sum" '/Function : /{p=($3==k)} p' > $OUT/new-$k.sass
  echo "new twoshot $k: $(grep -c '/\*[0-9a-f]*\*/' $OUT/new-$k.sass) instructions"
done
dr v 2 $B STEPS=variants VARIANT_COLLS=allreduce VARIANT_MINBYTES=1M VARIANT_MAXBYTES=64M VARIANT_FACTOR=4 VARIANT_ARGS="-n 50 -d bf16" VARIANTS="old:NVLS_PTX_DIR=$PWD/ptx new:NVLS_PTX_DIR=$P"
dr vf 2 $B STEPS=variants VARIANT_COLLS=allreduce VARIANT_MINBYTES=1M VARIANT_MAXBYTES=64M VARIANT_FACTOR=4 VARIANT_ARGS="-n 50" VARIANTS="old:NVLS_PTX_DIR=$PWD/ptx new:NVLS_PTX_DIR=$P"
for r in v vf; do for v in old new; do echo "== $r $v $(grep -E '^ +[0-9]+ ' $OUT/$r/variant-$v-allreduce.log 2>/dev/null | awk '{printf "%dM %s/%s; ", $1/1048576, $6, $10}')"; done; done
mkdir -p /tmp/b && tar xJf .devbin/bins.txz -C /tmp/b
mkdir -p $OUT/s4
for d in f32 bf16; do for v in old new; do
  dir=$PWD/ptx; [ $v = new ] && dir=$P
  NVLS_PTX_DIR=$dir timeout 60 /tmp/b/nvls-bench -g 1 -ranks 4 -transport unicast -coll allreduce -d $d -b 1M -e 64M -f 4 -graph -n 50 -json $OUT/s4/$d-$v.json > $OUT/s4/$d-$v.txt 2>&1
  echo "== 4 ranks on GPU 0 $d $v rc=$? $(grep -E '^ +[0-9]+ ' $OUT/s4/$d-$v.txt | awk '{printf "%dM %s/%s; ", $1/1048576, $6, $10}')"
done; done
dr k 2 $B NVLS_PTX_DIR=$P STEPS=kernels KERNELS_LIMIT=100 SOAK_FOR=10s
dr c 2 $B NVLS_PTX_DIR=$P STEPS=collectives COLLECTIVES_LIMIT=150
grep -h -- "--- FAIL" $OUT/k/*.log $OUT/c/*.log 2>/dev/null | head
(cd $OUT && tar czf sass.tgz *.sass && rm -f *.sass)
batch_pack m v vf s4 k c
