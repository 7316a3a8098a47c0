#!/bin/bash
# Run 77 (4 GPUs; GPUs 0-1 for 2 ranks): the plan after run 76 in one call. Tree at exp/cep2 (its PTX from the ptx step); main's benchmarks in bench-main.txz.
# main's min grid for the 4-rank reduce-scatter and all-gather; cepattern 2/4/8 pieces; flagcost; exp/cep2 at 4 GPUs (NVLS_CE_RS_WIDE with 2 and 4 pieces) and 2 GPUs (NVLS_CE_PIECES 2, 4); the branch's matrices at 4 GPUs if it wins.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 NVLS_ENABLE=0 NVLS_TRANSPORT=unicast
export BUDGET=560
source scripts/device-batch.sh
nvidia-smi -L > $OUT/machine.txt; nvidia-smi --query-gpu=driver_version --format=csv,noheader | head -1 >> $OUT/machine.txt
# The probes build beside the ptx step (CPU only).
( nvcc -O2 -arch=sm_90 -o /tmp/cepattern scripts/cepattern.cu && nvcc -O2 -arch=sm_90 -o /tmp/flagcost scripts/flagcost.cu -lcuda ) > $OUT/probes-build.log 2>&1 &
bp=$!
M=BINS=.devbin/bench-main.txz
P=/tmp/device-run-ptx/ptx
G2=CUDA_VISIBLE_DEVICES=0,1
dr px 4 STEPS=ptx
grep -h "entries\|error" $OUT/px/ptx.log | cut -c1-120 | head -4
[ -d $P ] || { echo "no PTX"; batch_pack px; exit 1; }
W="w2:NVLS_CE_RS_WIDE=1,NVLS_CE_PIECES=2 w4:NVLS_CE_RS_WIDE=1,NVLS_CE_PIECES=4"
ar4() { dr $1 4 $M STEPS=variants VARIANT_COLLS=allreduce VARIANT_MINBYTES=128M VARIANT_MAXBYTES=512M VARIANT_FACTOR=2 VARIANT_ARGS="-n 20" VARIANTS="$2"; }
ar4n() { dr $1 4 NVLS_PTX_DIR=$P STEPS=variants VARIANT_COLLS=allreduce VARIANT_MINBYTES=128M VARIANT_MAXBYTES=512M VARIANT_FACTOR=2 VARIANT_ARGS="-n 20" VARIANTS="$2"; }
ar4 ao4 "old:"
ar4n an4 "new: $W"
wait $bp
echo "== probes build rc=$? at $(( $(date +%s) - batch_t0 )) s"; tail -3 $OUT/probes-build.log
for n in 2 4 8; do ( timeout 40 /tmp/cepattern 128 5 $n ) > $OUT/cepattern-$n.log 2>&1; echo "== cepattern $n rc=$? at $(( $(date +%s) - batch_t0 )) s"; tail -6 $OUT/cepattern-$n.log; done
( CUDA_VISIBLE_DEVICES=0,1 timeout 40 /tmp/flagcost 128 9 ) > $OUT/flagcost.log 2>&1; echo "== flagcost rc=$? at $(( $(date +%s) - batch_t0 )) s"; tail -10 $OUT/flagcost.log
dr mg 4 $M STEPS=variants VARIANT_COLLS="reducescatter allgather" VARIANT_MINBYTES=512K VARIANT_MAXBYTES=8M VARIANT_FACTOR=2 VARIANT_ARGS="-n 100" VARIANTS="base: mg0:NVLS_MIN_GRID=0 mg8:NVLS_MIN_GRID=8"
dr p2 2 $G2 NVLS_PTX_DIR=$P STEPS=variants VARIANT_COLLS="reduce allreduce" VARIANT_MINBYTES=128M VARIANT_MAXBYTES=512M VARIANT_FACTOR=2 VARIANT_ARGS="-n 20" VARIANTS="p8: p2:NVLS_CE_PIECES=2 p4:NVLS_CE_PIECES=4"
ar4n an4b "new2: ${W//w/v}"
ar4 ao4b "old2:"
dr mgb 4 $M STEPS=variants VARIANT_COLLS="reducescatter allgather" VARIANT_MINBYTES=512K VARIANT_MAXBYTES=8M VARIANT_FACTOR=2 VARIANT_ARGS="-n 100" VARIANTS="mg8b:NVLS_MIN_GRID=8 mg0b:NVLS_MIN_GRID=0 baseb:"
t() { grep -E '^ +536870912 ' $OUT/$1/variant-$2-allreduce.log 2>/dev/null | awk '{print $6}'; }
win=1
for pair in "ao4 old an4 w2 an4 w4" "ao4b old2 an4b v2 an4b v4"; do
  set -- $pair; o=$(t $1 $2); a=$(t $3 $4); b=$(t $5 $6)
  echo "all-reduce 512M 4 GPUs: main $o, 2 pieces $a, 4 pieces $b"
  awk -v o="$o" -v a="$a" -v b="$b" 'BEGIN{m=(a+0>0&&(b+0<=0||a<b))?a:b; exit !(o+0>0 && m+0>0 && m < 0.98*o)}' || win=0
done
if [ $win = 1 ]; then
  dr c4 4 NVLS_PTX_DIR=$P STEPS=collectives COLLECTIVES_RUN='GPUCopyEngine|GPUAllReduceMatrix|GPUCollsMatrix|GPUTimeout' COLLECTIVES_LIMIT=$(( $(batch_left) - 15 ))
fi
batch_pack px ao4 an4 mg p2 an4b ao4b mgb $([ -d $OUT/c4 ] && echo c4)
