#!/bin/bash
# Run 98 (2 GPUs): one process driving both GPUs (-launch workers) against one process per GPU, all-reduce f32 with graphs, 8 B - 256 MiB.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 NVLS_ENABLE=0 NVLS_TRANSPORT=unicast
export BUDGET=200
source scripts/device-batch.sh
nvidia-smi -L > $OUT/machine.txt; nvidia-smi --query-gpu=driver_version --format=csv,noheader | head -1 >> $OUT/machine.txt
B=BINS=.devbin/bins.txz
dr ln 2 $B STEPS=launch LAUNCH_MODES=workers LAUNCH_MAXBYTES=256M LAUNCH_GRAPH="-graph -n 100"
dr od 2 $B STEPS=mpisweep COLLS=allreduce DTYPES=f32 MPI_ARGS="-n 100" MPI_MAXBYTES=256M MPISWEEP_LIMIT=90
python3 scripts/goals.py $OUT/ln/launch-workers.json $OUT/od/mpisweep/*.json > $OUT/goals.txt 2>&1; grep -v "^not measured" $OUT/goals.txt | cut -c1-160
python3 - $OUT/ln/launch-workers.json $OUT/od/mpisweep/allreduce-f32-graph.json <<'PY'
import json,sys
a=json.load(open(sys.argv[1]))['results']; b={r['size']:r for r in json.load(open(sys.argv[2]))['results']}
for r in a:
  m=b.get(r['size'])
  if not m: continue
  s=[]
  for pl in ['out_of_place','in_place']:
    x=max(r[pl]['rank_times_us']); y=max(m[pl]['rank_times_us'])
    s.append("%s single %.2f mpi %.2f x%.3f"%(pl[:3],x,y,x/y))
  print("%10d  %s"%(r['size'],"   ".join(s)))
PY
batch_pack ln od
