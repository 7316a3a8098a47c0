#!/bin/bash
# Run 85 (4 GPUs): main (DefaultOneShotMax 128 KiB). The scoreboard at the sizes run 72's factor-4 sweeps skipped (16 B x 4^k to 256 MiB); the 4-rank reduce at 128 KiB - 2 MiB with LL limits and a min grid; the 4-rank copy-engine limit for the all-gather and all-reduce.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 NVLS_ENABLE=0 NVLS_TRANSPORT=unicast
export BUDGET=560
source scripts/device-batch.sh
nvidia-smi -L > $OUT/machine.txt; nvidia-smi --query-gpu=driver_version --format=csv,noheader | head -1 >> $OUT/machine.txt
M=BINS=.devbin/bench-main.txz
rd() { dr $1 4 $M STEPS=variants VARIANT_COLLS=reduce VARIANT_MINBYTES=128K VARIANT_MAXBYTES=2M VARIANT_FACTOR=2 VARIANT_ARGS="-n 100" VARIANTS="$2"; }
rd rd "base: ll256:NVLS_LL_MAX=256K ll512:NVLS_LL_MAX=512K ll1m:NVLS_LL_MAX=1M mg64:NVLS_MIN_GRID=64"
dr od 4 $M STEPS=mpisweep MPI_ARGS="-b 16" MPI_MAXBYTES=256M MPISWEEP_LIMIT=200
rd rdb "mg64b:NVLS_MIN_GRID=64 ll1mb:NVLS_LL_MAX=1M ll512b:NVLS_LL_MAX=512K ll256b:NVLS_LL_MAX=256K baseb:"
dr ce 4 $M STEPS=variants VARIANT_COLLS=allgather VARIANT_MINBYTES=128M VARIANT_MAXBYTES=512M VARIANT_FACTOR=2 VARIANT_ARGS="-n 20" VARIANTS="base: c32:NVLS_CE_MIN=32M c64:NVLS_CE_MIN=64M"
[ $(batch_left) -gt 60 ] && dr ca 4 $M STEPS=variants VARIANT_COLLS=allreduce VARIANT_MINBYTES=256M VARIANT_MAXBYTES=256M VARIANT_FACTOR=2 VARIANT_ARGS="-n 20" VARIANTS="base: c64:NVLS_CE_MIN=64M"
python3 scripts/goals.py $OUT/od/mpisweep/*.json > $OUT/goals.txt 2>&1; grep -v "^not measured" $OUT/goals.txt | cut -c1-150
batch_pack rd od rdb ce $([ -d $OUT/ca ] && echo ca)
