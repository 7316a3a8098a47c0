export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 NVLS_TRANSPORT=unicast
mkdir -p $OUT/r; R=$OUT/r
for i in 1 2 3 4; do for v in 53e12df 38f1d1c ef58f8c; do
 p=""; [ $v != 53e12df ] && p="NVLS_PTX_DIR=$PWD/.devbin/ptx"
 s=$(date +%s); env $p NVLS_GPU_VRANKS=2 timeout 100 .devbin/c-$v.test -test.run 'GPUGraphReplay' -test.v > $R/$v-$i.log 2>&1; rc=$?
 echo "$v run $i: rc=$rc $(( $(date +%s)-s ))s PASS=$(grep -c -- '--- PASS' $R/$v-$i.log) FAIL=$(grep -c -- '--- FAIL' $R/$v-$i.log) $(grep -m1 -o 'timed out waiting[^"]*block [0-9]*' $R/$v-$i.log)"
done; done
tar czf $OUT/r.tgz -C $OUT r; rm -rf $OUT/r
