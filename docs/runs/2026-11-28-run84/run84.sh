#!/bin/bash
# Run 84 (2 GPUs): main (DefaultOneShotMax 128 KiB, DefaultOneShotMax2 512 KiB). The 2-rank one-shot limit on this card kind; the scoreboard at the sizes the factor-4 sweeps skipped (16 B x 4^k to 256 MiB).
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 NVLS_ENABLE=0 NVLS_TRANSPORT=unicast
export BUDGET=560
source scripts/device-batch.sh
nvidia-smi -L > $OUT/machine.txt; nvidia-smi --query-gpu=driver_version --format=csv,noheader | head -1 >> $OUT/machine.txt
M=BINS=.devbin/bench-main.txz
os() { dr $1 2 $M STEPS=variants VARIANT_COLLS="reduce allreduce" VARIANT_MINBYTES=512K VARIANT_MAXBYTES=2M VARIANT_FACTOR=2 VARIANT_ARGS="-n 100" VARIANTS="$2"; }
os os "base: os1m:NVLS_ONESHOT_MAX=1M"
dr od 2 $M STEPS=mpisweep MPI_ARGS="-b 16" MPI_MAXBYTES=256M MPISWEEP_LIMIT=240
os osb "os1mb:NVLS_ONESHOT_MAX=1M baseb:"
python3 scripts/goals.py $OUT/od/mpisweep/*.json > $OUT/goals.txt 2>&1; grep -v "^not measured" $OUT/goals.txt | cut -c1-150
batch_pack os od osb
