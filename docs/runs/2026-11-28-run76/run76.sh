#!/bin/bash
# Run 76 (4 GPUs): where the 4-rank reduce-scatter and all-gather spend 1-2 MiB: kernel durations from ncu (one single-pass metric, gpu__time_duration, no replay) on rank 0 under mpirun, nvls's kernels and NCCL's (default and symmetric) in the same process; no graphs.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 NVLS_ENABLE=0 NVLS_TRANSPORT=unicast
nvidia-smi -L > $OUT/machine.txt; nvidia-smi --query-gpu=driver_version --format=csv,noheader | head -1 >> $OUT/machine.txt
mkdir -p /tmp/b && tar xJf .devbin/bench-main.txz -C /tmp/b
cat > /tmp/w.sh <<'E'
#!/bin/bash
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 NVLS_ENABLE=0
if [ "$OMPI_COMM_WORLD_RANK" = 0 ]; then
  exec ncu --metrics gpu__time_duration.sum --cache-control none --clock-control none --csv --log-file "$NCU_LOG" "$@"
fi
exec "$@"
E
chmod +x /tmp/w.sh
T0=$(date +%s)
for c in reducescatter allgather; do
  NCU_LOG=$OUT/ncu-$c.csv timeout 90 mpirun --allow-run-as-root --bind-to none -np 4 -x NCCL_NVLS_ENABLE -x TORCH_SYMM_MEM_DISABLE_MULTICAST -x NVSHMEM_DISABLE_NVLS -x NVLS_ENABLE -x NVLS_TRANSPORT -x NCU_LOG \
    /tmp/w.sh /tmp/b/nvls-bench-mpi -transport unicast -coll $c -b 1M -e 2M -f 2 -n 5 -w 2 -compare nccl > $OUT/$c.log 2>&1
  echo "== $c rc=$? at $(( $(date +%s) - T0 )) s, $(grep -c gpu__time_duration $OUT/ncu-$c.csv 2>/dev/null) kernel rows"
  grep gpu__time_duration $OUT/ncu-$c.csv 2>/dev/null | awk -F'","' '{print $5" | "$(NF)}' | cut -c1-150 | sort | uniq -c | sort -rn | head -8
done
tail -5 $OUT/reducescatter.log
