#!/bin/bash
# Run 128 (1 GPU): the SASS of the unicast all-reduce and reduce-scatter kernels, f32 and bf16 sum, from the committed PTX (ptxas -arch=sm_90, cuobjdump -sass), for the 4-rank bf16 all-reduce's gap (run 95).
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 NVLS_ENABLE=0 NVLS_TRANSPORT=unicast
for f in allreduce_uc reducescatter_uc; do
  ptxas -arch=sm_90 -O3 ptx/$f.ptx -o /tmp/$f.cubin 2>&1 | tail -2
  cuobjdump -sass /tmp/$f.cubin > /tmp/$f.sass
  for k in nvls_${f%_uc}_twoshot_f32_sum nvls_${f%_uc}_twoshot_bf16_sum nvls_${f%_uc}_oneshot_f32_sum nvls_${f%_uc}_oneshot_bf16_sum; do
    awk -v k="$k" '/Function : /{p=($3==k)} p' /tmp/$f.sass > $OUT/$k.sass
    [ -s $OUT/$k.sass ] && echo "$k: $(grep -c '/\*[0-9a-f]*\*/' $OUT/$k.sass) instructions, LDG $(grep -c 'LDG' $OUT/$k.sass), STG $(grep -c 'STG' $OUT/$k.sass)"
  done
done
cd $OUT && tar czf sass.tgz *.sass && rm -f *.sass
