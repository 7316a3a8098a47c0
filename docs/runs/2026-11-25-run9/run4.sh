export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 NVLS_TRANSPORT=unicast
mkdir -p $OUT/r; R=$OUT/r; v=ef58f8c
for cfg in 32:1 32:2 32:3 32:4 32:5 32:6 1:1; do mc=${cfg%%:*}; i=${cfg##*:}
 s=$(date +%s); CUDA_DEVICE_MAX_CONNECTIONS=$mc NVLS_PTX_DIR=$PWD/.devbin/ptx NVLS_GPU_VRANKS=2 timeout 100 .devbin/c-$v.test -test.run 'GPUGraphReplay' -test.v > $R/mc$mc-$i.log 2>&1; rc=$?
 echo "maxconn=$mc run $i: rc=$rc $(( $(date +%s)-s ))s PASS=$(grep -c -- '--- PASS' $R/mc$mc-$i.log) FAIL=$(grep -c -- '--- FAIL' $R/mc$mc-$i.log) $(grep -m1 -o 'timed out waiting[^"]*block [0-9]*' $R/mc$mc-$i.log)"
done
tar czf $OUT/r.tgz -C $OUT r; rm -rf $OUT/r
