#!/usr/bin/env bash
# One whole build-check-measure cycle on a lent GPU machine (the device
# call), unicast only: no cuMulticast* entry point is ever called there and
# no multimem kernel runs (DEVELOPERS.md's safety rule).
#
# Here (the dev machine, with Go and Debian's OpenMPI):
#   make devbin            # .devbin/bins.tgz: stripped gpu test binaries,
#                          # nvls-bench, and the cgo/MPI binaries
# On the device (through the device tool, carrying .devbin):
#   scripts/device-run.sh GPUS [MAXBYTES]
#
# GPUS is the number of ranks (the GPUs of the machine, 2 to 8; with one
# GPU, VRANKS=N runs N virtual ranks on it where the tests support it).
# STEPS picks the steps (default: all, in this order):
#   ptx         regenerate the PTX with nvcc (scripts/ptx-device.sh); the
#               tests then load it (NVLS_PTX_DIR) instead of the embedded PTX
#   kernels     kernels gpu tests: the correctness matrix, broadcast,
#               barrier wrap, timeout, and a soak (SOAK runs, default 20000,
#               at most SOAK_FOR, default 150s)
#   collectives collectives gpu tests (matrix, broadcast, barrier, graph
#               replay x10,000, timeout); the soak is its own step
#   ll          nvls-bench 8 B - 1 MiB with LL off (NVLS_LL_MAX=0) and on,
#               with -graph, in one process each
#   sweep       bench/gpu-sweep.sh: all-reduce f32/bf16 and broadcast, 8 B to
#               MAXBYTES (default 4G), with and without -graph, NCCL beside
#   mpi         mpirun -np GPUS: the team/mpi gpu tests and nvls-bench-mpi
#               (8 B - 64 MiB, NCCL beside)
#   rankkill    mpirun --enable-recovery -np GPUS: the last rank dies
#   soak        collectives GPU soak for SOAK_DURATION (default 9m)
#   simdiff     (not run by default) the simulator against the driver on
#               GPU 0 (internal/simdiff): DIFF_SEED (default 1), DIFF_SEQS
#               (default 300) random sequences, at most ~100 s of them
# Results: $OUT/r.tgz (logs, JSON, SVG, summary.txt) and, with the ptx
# step, $OUT/ptx.tgz (copy into ptx/ and commit). The device tool returns
# at most 8 files: everything else stays inside the two archives.
set -uo pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 NVLS_TRANSPORT=unicast
export OMPI_MCA_btl_vader_single_copy_mechanism=none
cd "$(dirname "$0")/.."
: "${OUT:?OUT must name the directory whose files come back}"
g=${1:?usage: scripts/device-run.sh GPUS [MAXBYTES]}
maxb=${2:-4G}
steps=${STEPS:-ptx kernels collectives ll sweep mpi rankkill soak}
R=$OUT/r
B=$PWD/.devbin/bins
mkdir -p "$R" "$B"
tar xzf .devbin/bins.tgz -C "$B" || { echo "device-run: no .devbin/bins.tgz (make devbin)" >&2; exit 2; }
envs=(-x NCCL_NVLS_ENABLE -x TORCH_SYMM_MEM_DISABLE_MULTICAST -x NVSHMEM_DISABLE_NVLS -x NVLS_TRANSPORT
	-x OMPI_MCA_btl_vader_single_copy_mechanism)
[ -n "${NVLS_PTX_DIR:-}" ] && envs+=(-x NVLS_PTX_DIR)
vr=()
[ -n "${VRANKS:-}" ] && vr=(env "NVLS_GPU_VRANKS=$VRANKS")

{
	nvidia-smi -L
	nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
	nvidia-smi topo -m
	date -u
} >"$R/machine.txt" 2>&1

# step NAME SECONDS CMD...: runs CMD with a time limit, its output in
# $R/NAME.log, one line in $R/summary.txt.
step() {
	local name=$1 limit=$2
	shift 2
	local s
	s=$(date +%s)
	timeout "$limit" "$@" >"$R/$name.log" 2>&1
	local rc=$?
	local line
	line="$name: rc $rc, $(($(date +%s) - s)) s, PASS $(grep -c -- '--- PASS' "$R/$name.log") FAIL $(grep -c -- '--- FAIL' "$R/$name.log") SKIP $(grep -c -- '--- SKIP' "$R/$name.log")"
	echo "$line" | tee -a "$R/summary.txt"
	grep -- '--- FAIL' "$R/$name.log" | head -n 20 | tee -a "$R/summary.txt"
	return 0
}
want() { [[ " $steps " == *" $1 "* ]]; }

if want ptx; then
	OUT=/tmp/device-run-ptx scripts/ptx-device.sh >"$R/ptx.log" 2>&1
	echo "ptx: rc $?" | tee -a "$R/summary.txt"
	if [ -d /tmp/device-run-ptx/ptx ]; then
		tar czf "$OUT/ptx.tgz" -C /tmp/device-run-ptx ptx
		export NVLS_PTX_DIR=/tmp/device-run-ptx/ptx
		envs+=(-x NVLS_PTX_DIR)
	fi
fi
want kernels && step kernels 300 "${vr[@]}" "$B/kernels.test" -test.v -test.run 'GPU' \
	-soak "${SOAK:-20000}" -soak-for "${SOAK_FOR:-150s}"
want collectives && step collectives 420 "${vr[@]}" "$B/collectives.test" -test.v -test.run 'GPU' \
	-test.skip 'GPUSoak' -test.timeout 7m
if want ll; then
	for ll in 0 65536; do
		step "ll-$ll" 120 env "NVLS_LL_MAX=$ll" "$B/nvls-bench" -transport unicast -g "$g" -b 8 -e 1M -f 2 \
			-graph -json "$R/ll-$ll.json"
	done
fi
want sweep && step sweep 560 env NVLS_BENCH="$B/nvls-bench" bench/gpu-sweep.sh "$R/sweep" "$g" "$maxb"
if want mpi; then
	step mpi-test 200 mpirun --allow-run-as-root -np "$g" "${envs[@]}" "$B/mpi.test" -test.v -test.run GPU -test.timeout 180s
	step mpi-bench 200 mpirun --allow-run-as-root -np "$g" "${envs[@]}" "$B/nvls-bench-mpi" -transport unicast \
		-b 8 -e 64M -f 4 -compare nccl -json "$R/mpi-bench.json"
fi
if want rankkill; then
	step rankkill 200 mpirun --allow-run-as-root --enable-recovery -np "$g" "${envs[@]}" "$B/rankkill.test" \
		-test.v -test.run GPURankKill -test.timeout 180s
	echo "rankkill: $(grep -c '^rankkill: rank [0-9]*: PASS$' "$R/rankkill.log") survivor(s) PASS (want $((g - 1)))" |
		tee -a "$R/summary.txt"
fi
if want soak; then
	d=${SOAK_DURATION:-9m}
	step soak 590 env "NVLS_SOAK_DURATION=$d" "${vr[@]}" "$B/collectives.test" -test.v -test.run GPUSoak -test.timeout 10m
	grep -E 'soak|#wrong' "$R/soak.log" | tail -n 3 | tee -a "$R/summary.txt"
fi
if want simdiff; then
	step simdiff 200 "$B/simdiff.test" -test.v -test.run GPUDiff -diff.seed "${DIFF_SEED:-1}" -diff.seqs "${DIFF_SEQS:-300}"
	grep -E '^simdiff:|^difference' "$R/simdiff.log" | head -n 40 | tee -a "$R/summary.txt"
fi
tar czf "$OUT/r.tgz" -C "$OUT" r
