#!/bin/bash
# Run 83 (4 GPUs; GPUs 0-1 for 2 ranks): exp/overlap's NVLS_CE_OVERLAP=K against main (one binary: unset is main), the 4-rank one-shot limit, ncu of the 2-rank all-gather at 1-2 MiB.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 NVLS_ENABLE=0 NVLS_TRANSPORT=unicast
export BUDGET=560
source scripts/device-batch.sh
nvidia-smi -L > $OUT/machine.txt; nvidia-smi --query-gpu=driver_version --format=csv,noheader | head -1 >> $OUT/machine.txt
M=BINS=.devbin/bench-exp-overlap.txz
O="k2:NVLS_CE_OVERLAP=2 k4:NVLS_CE_OVERLAP=4 k8:NVLS_CE_OVERLAP=8"
C="c:NVLS_CE_MIN=32M c2:NVLS_CE_MIN=32M,NVLS_CE_OVERLAP=2 c4:NVLS_CE_MIN=32M,NVLS_CE_OVERLAP=4 c8:NVLS_CE_MIN=32M,NVLS_CE_OVERLAP=8"
ar4() { dr $1 4 $M STEPS=variants VARIANT_COLLS=allreduce VARIANT_MINBYTES=128M VARIANT_MAXBYTES=512M VARIANT_FACTOR=2 VARIANT_ARGS="-n 20" VARIANTS="$2"; }
ar4 ov "base: $O $C"
dr os 4 $M STEPS=variants VARIANT_COLLS="allreduce reduce" VARIANT_MINBYTES=128K VARIANT_MAXBYTES=1M VARIANT_FACTOR=2 VARIANT_ARGS="-n 100" VARIANTS="base: os128:NVLS_ONESHOT_MAX=128K"
ar4 ovb "${C//:/b:} ${O//:/b:} baseb:"
dr osb 4 $M STEPS=variants VARIANT_COLLS="allreduce reduce" VARIANT_MINBYTES=128K VARIANT_MAXBYTES=1M VARIANT_FACTOR=2 VARIANT_ARGS="-n 100" VARIANTS="os128b:NVLS_ONESHOT_MAX=128K baseb:"
# ncu on rank 0 of 2 (GPUs 0-1): kernel durations, all-gather 1-2 MiB, nvls and NCCL.
mkdir -p /tmp/b && tar xJf .devbin/bench-exp-overlap.txz -C /tmp/b
cat > /tmp/w.sh <<'E'
#!/bin/bash
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 NVLS_ENABLE=0
if [ "$OMPI_COMM_WORLD_RANK" = 0 ]; then
  exec ncu --metrics gpu__time_duration.sum --cache-control none --clock-control none --csv --log-file "$NCU_LOG" "$@"
fi
exec "$@"
E
chmod +x /tmp/w.sh
mkdir -p $OUT/ncu
NCU_LOG=$OUT/ncu/ncu-allgather.csv CUDA_VISIBLE_DEVICES=0,1 timeout 90 mpirun --allow-run-as-root --bind-to none -np 2 -x CUDA_VISIBLE_DEVICES -x NCCL_NVLS_ENABLE -x TORCH_SYMM_MEM_DISABLE_MULTICAST -x NVSHMEM_DISABLE_NVLS -x NVLS_ENABLE -x NVLS_TRANSPORT -x NCU_LOG \
  /tmp/w.sh /tmp/b/nvls-bench-mpi -transport unicast -coll allgather -b 1M -e 2M -f 2 -n 5 -w 2 -compare nccl > $OUT/ncu/allgather.log 2>&1
echo "== ncu allgather rc=$? at $(( $(date +%s) - batch_t0 )) s, $(grep -c gpu__time_duration $OUT/ncu/ncu-allgather.csv 2>/dev/null) kernel rows"
grep gpu__time_duration $OUT/ncu/ncu-allgather.csv 2>/dev/null | awk -F'","' '{print $5" | "$(NF)}' | cut -c1-150 | sort | uniq -c | sort -rn | head -8
t() { grep -E '^ +536870912 ' $OUT/$1/variant-$2-allreduce.log 2>/dev/null | awk '{print $6}'; }
best=; win=1
for K in 2 4 8; do
  a=$(t ov base); b=$(t ov k$K); a2=$(t ovb baseb); b2=$(t ovb k${K}b)
  echo "all-reduce 512M: main $a / $a2, K=$K $b / $b2"
  if awk -v a="$a" -v b="$b" -v c="$a2" -v d="$b2" 'BEGIN{exit !(a+0>0 && b+0>0 && c+0>0 && d+0>0 && b < 0.98*a && d < 0.98*c)}'; then best=$K; fi
done
if [ -n "$best" ] && [ $(batch_left) -gt 120 ]; then
  dr ce 4 NVLS_CE_OVERLAP=$best STEPS=collectives COLLECTIVES_RUN='GPUCopyEngine' COLLECTIVES_LIMIT=$(( $(batch_left) - 15 ))
fi
batch_pack ov os ovb osb $([ -d $OUT/ce ] && echo ce)
