#!/usr/bin/env bash
# shim-device.sh: on a GPU machine (CUDA toolkit, OpenMPI, a real NCCL),
# build NVIDIA's nccl-tests (a checkout carried to the machine, which
# reaches no network: fetched on the dev machine with the search tool's
# fetch into an ignored folder, never committed; NCCL_TESTS names it)
# against nccl.h with MPI=1 and run its collectives through libnccl-nvls
# and through the real NCCL, side by side. Unicast only: multicast is
# never run on shared machines, and never nccl-tests' -D 3 or -D 4.
#
#   SHIM=bin/libnccl-nvls.so REAL_NCCL=/usr/lib/x86_64-linux-gnu/libnccl.so.2 \
#     NCCL_TESTS=.nccl-tests NGPUS=4 OUT=shim-run scripts/shim-device.sh
set -euo pipefail
SHIM=${SHIM:-bin/libnccl-nvls.so}
REAL_NCCL=${REAL_NCCL:-$(ldconfig -p | awk '/libnccl.so.2 /{print $NF; exit}')}
NGPUS=${NGPUS:-4}
OUT=${OUT:-shim-run}
NCCL_TESTS=${NCCL_TESTS:-.nccl-tests}
CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
MPI_HOME=${MPI_HOME:-/usr/lib/x86_64-linux-gnu/openmpi}
NCCL_HOME=${NCCL_HOME:-$(dirname "$(dirname "$REAL_NCCL")")}

export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
export NVLS_TRANSPORT=unicast

[ -f "$SHIM" ] || { echo "no $SHIM: run make shim first" >&2; exit 1; }
[ -f "$REAL_NCCL" ] || { echo "no real NCCL (REAL_NCCL=$REAL_NCCL)" >&2; exit 1; }
SHIM=$(readlink -f "$SHIM")
mkdir -p "$OUT"
work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
[ -f "$NCCL_TESTS/Makefile" ] || { echo "no nccl-tests checkout at $NCCL_TESTS (NCCL_TESTS)" >&2; exit 1; }
cp -r "$NCCL_TESTS" "$work/nccl-tests"
make -C "$work/nccl-tests" -j MPI=1 MPI_HOME="$MPI_HOME" CUDA_HOME="$CUDA_HOME" NCCL_HOME="$NCCL_HOME" >"$OUT/build.log" 2>&1
bins=$work/nccl-tests/build

run() { # run LABEL ENV... -- CMD...
  local label=$1; shift
  local envs=()
  while [ "$1" != -- ]; do envs+=("$1"); shift; done; shift
  echo "== $label: $*" | tee -a "$OUT/summary.txt"
  env "${envs[@]}" timeout 900 "$@" >"$OUT/$label.txt" 2>&1 || echo "   exit $?" | tee -a "$OUT/summary.txt"
  grep -E "Out of bounds|#wrong|Avg bus bandwidth" "$OUT/$label.txt" | tail -n 3 | tee -a "$OUT/summary.txt" || true
  awk '$0 !~ /^#/ && NF > 10 && ($9 != 0 || $13 != 0) {bad=1} END {if (bad) print "   #wrong != 0"}' "$OUT/$label.txt" | tee -a "$OUT/summary.txt"
}

for coll in all_reduce all_gather reduce_scatter broadcast reduce; do
  for g in 0 1; do
    args=(-b 8 -e 256M -f 2 -d all -o all -G "$g" -c 1)
    [ "$coll" = all_gather ] || [ "$coll" = broadcast ] && args=(-b 8 -e 256M -f 2 -d all -G "$g" -c 1)
    run "$coll-g$NGPUS-G$g-shim" LD_PRELOAD="$SHIM" NVLS_REAL_NCCL="$REAL_NCCL" -- "$bins/${coll}_perf" -g "$NGPUS" "${args[@]}"
    run "$coll-g$NGPUS-G$g-nccl" -- "$bins/${coll}_perf" -g "$NGPUS" "${args[@]}"
    run "$coll-np$NGPUS-G$g-shim" -- mpirun --allow-run-as-root -np "$NGPUS" -x LD_PRELOAD="$SHIM" -x NVLS_REAL_NCCL="$REAL_NCCL" \
      -x NCCL_NVLS_ENABLE -x NVLS_TRANSPORT "$bins/${coll}_perf" -g 1 "${args[@]}"
    run "$coll-np$NGPUS-G$g-nccl" -- mpirun --allow-run-as-root -np "$NGPUS" -x NCCL_NVLS_ENABLE \
      "$bins/${coll}_perf" -g 1 "${args[@]}"
  done
done
echo "tables in $OUT/; summary in $OUT/summary.txt"
