#!/bin/bash
# Run 72 (4 GPUs): main's 4-GPU scoreboard in one run; scripts/cepattern.cu; exp/cepipe's PTX and its all-reduce at 128-512 MiB against main, with and without NVLS_CE_RS_ALL=1.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 NVLS_ENABLE=0 NVLS_TRANSPORT=unicast
source scripts/device-batch.sh
nvidia-smi -L > $OUT/machine.txt; nvidia-smi --query-gpu=driver_version --format=csv,noheader | head -1 >> $OUT/machine.txt; nvidia-smi topo -m >> $OUT/machine.txt
M=BINS=.devbin/bench-main.txz
dr sb 4 $M STEPS=mpisweep MPISWEEP_LIMIT=170
dr ss 4 $M STEPS=mpisweep MPI_MAXBYTES=64K MPI_ARGS="-n 200" MPISWEEP_LIMIT=80
dr ng 4 $M STEPS=mpisweep COLLS=allreduce GRAPHS=plain MPI_MAXBYTES=64K MPI_ARGS="-n 2000" MPISWEEP_LIMIT=50
dr sp 4 $M STEPS=launch LAUNCH_MODES=workers LAUNCH_GRAPH="-graph -n 1000" LAUNCH_MAXBYTES=512K
( nvcc -O2 -arch=sm_90 -o /tmp/cepattern scripts/cepattern.cu && timeout 50 /tmp/cepattern 128 5 ) > $OUT/cepattern.log 2>&1; echo "== cepattern rc=$? at $(( $(date +%s) - batch_t0 )) s"; tail -12 $OUT/cepattern.log
P=/tmp/device-run-ptx/ptx
dr px 4 STEPS=ptx
grep -h "entries\|error" $OUT/px/ptx.log | cut -c1-160
[ -d $P ] || { echo "no PTX"; batch_pack sb ss ng sp px; exit 1; }
dr o4 4 $M STEPS=variants VARIANT_COLLS=allreduce VARIANT_MINBYTES=128M VARIANT_MAXBYTES=512M VARIANT_FACTOR=2 VARIANT_ARGS="-n 20" VARIANTS="old:"
dr n4 4 NVLS_PTX_DIR=$P STEPS=variants VARIANT_COLLS=allreduce VARIANT_MINBYTES=128M VARIANT_MAXBYTES=512M VARIANT_FACTOR=2 VARIANT_ARGS="-n 20" VARIANTS="new: rsall:NVLS_CE_RS_ALL=1"
dr o4b 4 $M STEPS=variants VARIANT_COLLS=allreduce VARIANT_MINBYTES=128M VARIANT_MAXBYTES=512M VARIANT_FACTOR=2 VARIANT_ARGS="-n 20" VARIANTS="old2:"
dr n4b 4 NVLS_PTX_DIR=$P STEPS=variants VARIANT_COLLS=allreduce VARIANT_MINBYTES=128M VARIANT_MAXBYTES=512M VARIANT_FACTOR=2 VARIANT_ARGS="-n 20" VARIANTS="rsall2:NVLS_CE_RS_ALL=1"
batch_pack sb ss ng sp px o4 n4 o4b n4b
