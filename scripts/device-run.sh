#!/usr/bin/env bash
# One whole build-check-measure cycle on a lent GPU machine (the device
# call), unicast only: no cuMulticast* entry point is ever called there and
# no multimem kernel runs (DEVELOPERS.md's safety rule).
#
# Here (the dev machine, with Go and Debian's OpenMPI):
#   make devbin            # .devbin/bins.txz: stripped gpu test binaries,
#                          # nvls-bench, and the cgo/MPI binaries
#   (an A/B of two builds: make devbin-bench on one, which writes
#   .devbin/bench-BRANCH.txz, the two benchmarks alone, make devbin on the
#   other; on the device BINS=.devbin/bench-BRANCH.txz RUN=a with the
#   benchmark steps for the first, RUN=b for the second. Two whole
#   bins.txz no longer fit the device call's 64 MiB beside the tree, and
#   since run 73 one whole bins.txz and a bench archive do not either:
#   make devbin DEVBIN_KEEP="nvls-bench-mpi collectives.test ..." packs
#   only the binaries the call's steps run, about 6 MB.)
# On the device (through the device tool, carrying .devbin):
#   scripts/device-run.sh GPUS [MAXBYTES]
# (several runs in one call, within one budget: scripts/device-batch.sh)
#
# GPUS is the number of ranks: the machine's GPUs (2 to 8), one process
# each under mpirun. The single-GPU mode is GPUS 1 with VRANKS=N: N ranks
# share GPU 0 (the tests' NVLS_GPU_VRANKS, nvls-bench's -g 1 -ranks N,
# with the copy roofline column); the MPI steps need GPUS >= 2 and are
# skipped. SIM=1 runs the steps where there is no GPU, which is how the
# script is tested: nvls-bench on the simulated node (-sim, GPUS simulated
# GPUs), the gpu test binaries (they skip without a driver: the SKIP
# count), the MPI steps with the tests' CPU variants (mpirun
# --oversubscribe); no ptx, no NCCL, no nvls-bench-mpi (processes cannot
# share the simulated node).
#
# STEPS picks the steps (default: all, in this order):
#   ptx         regenerate the PTX with nvcc (scripts/ptx-device.sh); the
#               tests then load it (NVLS_PTX_DIR) instead of the embedded PTX
#   kernels     kernels gpu tests: the correctness matrix, broadcast,
#               barrier wrap, timeout, and a soak (SOAK runs, default 20000,
#               at most SOAK_FOR, default 150s)
#   collectives collectives gpu tests (every collective's matrix, graph
#               replay x10,000, timeout); the soak is its own step
#   benchtests  the nccl and bench gpu tests: NCCL's symmetric windows,
#               nvls-bench's short sweeps beside NCCL, shared ranks on GPU 0
#   ll          nvls-bench, every collective of COLLS, 8 B to LL_MAXBYTES
#               (default 1M; SIM: MAXBYTES) with LL off (NVLS_LL_MAX=0) and
#               on, with -graph
#   sweep       bench/gpu-sweep.sh: COLLS in f32 and bf16, 8 B to MAXBYTES
#               (default 4G), with and without -graph, NCCL beside (and NCCL
#               on symmetric memory where it has it); at most SWEEP_LIMIT
#               seconds (default 560): split it over calls with ONLY or COLLS
#   mpisweep    bench/gpu-sweep.sh with MPI=GPUS: one process per GPU
#               (nvls-bench-mpi), COLLS in f32 and bf16, 8 B to MPI_MAXBYTES
#               (default 512M), factor MPI_FACTOR (default 4), NCCL beside
#               (default and symmetric columns), GRAPHS (default graph: the
#               issue 22 yardstick), MPI_ARGS added to nvls-bench-mpi's
#               flags (e.g. "-n 200"); at most MPISWEEP_LIMIT s (default 300)
#   variants    one process per GPU, each collective of VARIANT_COLLS
#               (default allreduce) f32 with -graph, VARIANT_MINBYTES (default
#               8) to VARIANT_MAXBYTES (default 32M), NCCL beside, once per
#               word of VARIANTS ("NAME:VAR=VALUE[,VAR=VALUE...]" or "NAME:"
#               for none), e.g.
#               VARIANTS="base: ll256:NVLS_LL_MAX=256K"; sizes grow by
#               VARIANT_FACTOR (default 4), VARIANT_ARGS are added to
#               nvls-bench's flags (e.g. "-n 200 -w 20"):
#               $R/variant-NAME-COLL.json (give each call its own NAMEs)
#   launch      (not run by default) one process driving every GPU
#               (nvls-bench -g GPUS), all-reduce f32 with -graph, NCCL
#               beside, 8 B to LAUNCH_MAXBYTES (default 1M), once per word
#               of LAUNCH_MODES (default "serial parallel workers": the
#               GPUs' graphs launched from one thread, from a thread per
#               GPU woken each replay, or on each GPU's team worker;
#               LAUNCH_GRAPH replaces -graph, e.g. "-G 10": ten replays a
#               timed segment): $R/launch-MODE.json
#   eager       (not run by default) the same without graphs, once per word
#               of EAGER_MODES (default "workers caller": NVLS_LAUNCH, where
#               the calls launch), 8 B to EAGER_MAXBYTES (default 1M):
#               $R/eager-MODE.json
#   nvlink      nvidia-smi's NVLink data counters around an nvls-only run
#               of NVLINK_COLL (default allreduce) at NVLINK_BYTES (default
#               512M) and one with NCCL beside (one process per GPU, graphs,
#               -c 0 -w 2 -n 50: 52 collectives a place and library):
#               link bytes against the payload
#   ncclsym     nvls-bench -g GPUS -compare nccl (-g 1 in the single-GPU
#               mode: NCCL runs one rank per GPU), 8 B to NCCLSYM_MAXBYTES
#               (default 256M), with NCCL's tuning log (NCCL_DEBUG=INFO,
#               NCCL_DEBUG_SUBSYS=TUNING) to count the symmetric kernels
#               NCCL launched for its symmetric column
#   (KERNELS_RUN and COLLECTIVES_RUN narrow the kernels and collectives
#   steps' -test.run, default GPU: every GPU test; COLLECTIVES_SKIP the
#   collectives step's -test.skip, default GPUSoak; KERNELS_LIMIT and
#   COLLECTIVES_LIMIT their seconds, default 300 and 420)
#   mpi         mpirun -np GPUS: the team/mpi gpu tests and nvls-bench-mpi
#               (8 B - 64 MiB, NCCL beside, aligned timing)
#   rankkill    mpirun --enable-recovery -np GPUS, twice: the last rank
#               dies in a loop of eager all-reduces (TestGPURankKill), then
#               with a replay of a graph of 64 all-reduces in flight
#               (TestGPUGraphRankKill); one line per survivor: its time from
#               the kill to its error (limit timeout + 1 s), cuMemGetInfo
#               after a warm-up cycle and after Close, driver objects and
#               descriptors left; "rankkill: rank R: PASS|FAIL" each.
#               SIM: TestBootstrapRankKill under mpirun, and TestSimRankKill
#               (eager and graph) in one process
#   closeinflight  mpirun -np GPUS: Close right after 50 all-reduces and a
#               graph replay, no Sync, with and without a straggler
#               (TestGPUCloseInFlight); SIM: TestSimCloseInFlight
#   mismatch    mpirun -np GPUS: every collective with one argument
#               that differs on the last rank (TestGPUArgMismatchMPI): every
#               rank must fail with ErrArgMismatch in far less than the
#               timeout; one line a rank and case. SIM: TestSimArgMismatch
#               (the ranks goroutines of one process)
#   soak        with GPUS >= 2: mpirun -np GPUS, one process per GPU, the
#               six collectives at random, eager and graph replays
#               (TestGPUSoakMPI), for SOAK_DURATION (default: what DEADLINE
#               leaves, less 45 s); single-GPU mode: the collectives GPU
#               soak in one process (default 9m); SIM: TestSimSoak
#   shim        (not run by default) libnccl-nvls (issue 25) checked
#               unmodified: NVIDIA's nccl-tests, carried in .nccl-tests
#               (NCCL_TESTS; fetched on the dev machine, never committed),
#               built there with MPI=1 against the real nccl.h and run
#               through the shim (LD_PRELOAD) and the real NCCL side by
#               side (scripts/shim-device.sh: every collective, one process
#               -g GPUS and mpirun -np GPUS, -G 1 and 0, -c 1, then -d all
#               -o all under NVLS_DEBUG=INFO; at most SHIM_LIMIT s, default
#               320); then PyTorch's NCCL backend through the shim against
#               its own reference and the real NCCL (scripts/shim-torch.py,
#               at most SHIM_TORCH_LIMIT s, default 200; SHIM_TORCH=0
#               skips it). Results under
#               $R/shim; the summary lines in summary.txt. Needs GPUS >= 2.
#   simdiff     (not run by default) the simulator against the driver on
#               GPU 0 (cuda/sim/internal/simdiff): DIFF_SEED (default 1), DIFF_SEQS
#               (default 300) random sequences, at most ~100 s of them
# COLLS (default "allreduce broadcast reducescatter allgather reduce")
# names the collectives of ll and sweep; those the binary lacks are
# skipped, saying so.
# DEADLINE (seconds from the start, default 570) caps the whole run: a step
# gets at most what is left of it, and none starts with under 15 s left.
# Results: $OUT/r.tgz (logs, JSON, SVG, summary.txt, also printed; with
# RUN, every run directory of the call) and,
# with the ptx step, $OUT/ptx.tgz (copy into ptx/ and commit). The device
# tool returns at most 8 files: everything else stays inside the archives.
set -uo pipefail
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 NVLS_TRANSPORT=unicast
export OMPI_MCA_btl_vader_single_copy_mechanism=none
cd "$(dirname "$0")/.."
: "${OUT:?OUT must name the directory whose files come back}"
g=${1:?usage: scripts/device-run.sh GPUS [MAXBYTES]}
maxb=${2:-4G}
sim=${SIM:-0}
steps=${STEPS:-ptx kernels collectives benchtests ll sweep ncclsym mpi rankkill closeinflight mismatch soak}
export COLLS=${COLLS:-allreduce broadcast reducescatter allgather reduce}
# BINS (default .devbin/bins.txz) is the archive of binaries to run: a
# second build carried beside the first (say .devbin/bins-main.txz, main's
# against a branch's) runs with BINS naming it; RUN (default r) names the
# results' directory under $OUT, so that two runs in one call keep both.
bins=${BINS:-.devbin/bins.txz}
R=$OUT/${RUN:-r}
B=$PWD/.devbin/$(basename "$bins" .txz)
mkdir -p "$R" "$B"
t0=$(date +%s)
deadline=${DEADLINE:-570}
# bins.txz: xz where the machine has it, else Python's tarfile.
if [ ! -f "$bins" ]; then
	echo "device-run: no $bins (make devbin)" >&2
	exit 2
fi
# A call that runs the script several times unpacks the archive once: the
# stamp names the archive's size and time.
stamp="$(stat -c '%s %Y' "$bins")"
if [ "$(cat "$B/.unpacked" 2>/dev/null)" != "$stamp" ]; then
	rm -f "$B/.unpacked"
	if command -v xz >/dev/null 2>&1; then
		tar xJf "$bins" -C "$B"
	else
		python3 -c 'import sys, tarfile; tarfile.open(sys.argv[1]).extractall(sys.argv[2])' "$bins" "$B"
	fi || { echo "device-run: could not unpack $bins" >&2; exit 2; }
	echo "$stamp" >"$B/.unpacked"
fi
envs=(-x NCCL_NVLS_ENABLE -x TORCH_SYMM_MEM_DISABLE_MULTICAST -x NVSHMEM_DISABLE_NVLS -x NVLS_TRANSPORT
	-x OMPI_MCA_btl_vader_single_copy_mechanism)
[ -n "${NVLS_PTX_DIR:-}" ] && envs+=(-x NVLS_PTX_DIR)
# --bind-to none: at -np <= 2 OpenMPI binds each process to one core, which
# leaves a Go process one CPU for its launches, spinning waits and checks.
mpirun=(mpirun --allow-run-as-root --bind-to none)
# ranks: nvls-bench's flags for where the ranks run; vr: the tests'.
ranks=(-g "$g")
vr=()
if [ -n "${VRANKS:-}" ]; then
	ranks=(-g 1 -ranks "$VRANKS")
	vr=(env "NVLS_GPU_VRANKS=$VRANKS")
fi
if [ "$sim" = 1 ]; then
	ranks=(-sim "${ranks[@]}")
	mpirun+=(--oversubscribe)
fi
# single: the single-GPU mode; ng: the GPUs NCCL runs on (one rank each).
single=0 ng=$g
if [ "$g" = 1 ] || [ -n "${VRANKS:-}" ]; then
	single=1 ng=1
fi

if [ "$sim" = 1 ]; then
	echo "simulated node: $g GPU(s)${VRANKS:+, $VRANKS ranks on GPU 0}; $(uname -n)" >"$R/machine.txt"
	date -u >>"$R/machine.txt"
else
	{
		nvidia-smi -L
		nvidia-smi --query-gpu=name,driver_version,memory.total --format=csv
		nvidia-smi topo -m
		date -u
	} >"$R/machine.txt" 2>&1
fi

# step NAME SECONDS CMD...: runs CMD with a time limit, its output in
# $R/NAME.log, one line in $R/summary.txt (test counts, or nvls-bench's
# wrong-values line).
step() {
	local name=$1 limit=$2 s rc line left
	shift 2
	s=$(date +%s)
	left=$((deadline - (s - t0)))
	if [ "$left" -lt 15 ]; then
		echo "$name: skipped: the run's DEADLINE (${deadline} s) is reached" | tee -a "$R/summary.txt"
		return 0
	fi
	[ "$limit" -gt "$left" ] && limit=$left
	timeout "$limit" "$@" >"$R/$name.log" 2>&1
	rc=$?
	line="$name: rc $rc, $(($(date +%s) - s)) s, PASS $(grep -c -- '--- PASS' "$R/$name.log") FAIL $(grep -c -- '--- FAIL' "$R/$name.log") SKIP $(grep -c -- '--- SKIP' "$R/$name.log")"
	if grep -q '^# Out of bounds' "$R/$name.log"; then
		line="$name: rc $rc, $(($(date +%s) - s)) s, $(grep -h '^# Out of bounds' "$R/$name.log" | cut -c3-)"
	fi
	echo "$line" | tee -a "$R/summary.txt"
	grep -- '--- FAIL' "$R/$name.log" | head -n 20 | tee -a "$R/summary.txt"
	return 0
}
note() { echo "$1" | tee -a "$R/summary.txt"; }
want() { [[ " $steps " == *" $1 "* ]]; }
# known COLL: whether this nvls-bench has the collective.
known() { "$B/nvls-bench" -coll "$1" -h >/dev/null 2>&1; }

if want ptx; then
	if [ "$sim" = 1 ]; then
		note "ptx: skipped (SIM: no nvcc)"
	else
		OUT=/tmp/device-run-ptx scripts/ptx-device.sh >"$R/ptx.log" 2>&1
		note "ptx: rc $?"
		if [ -d /tmp/device-run-ptx/ptx ]; then
			tar czf "$OUT/ptx.tgz" -C /tmp/device-run-ptx ptx
			export NVLS_PTX_DIR=/tmp/device-run-ptx/ptx
			envs+=(-x NVLS_PTX_DIR)
		fi
	fi
fi
want kernels && step kernels "${KERNELS_LIMIT:-300}" "${vr[@]}" "$B/kernels.test" -test.v -test.run "${KERNELS_RUN:-GPU}" \
	-soak "${SOAK:-20000}" -soak-for "${SOAK_FOR:-150s}"
want collectives && step collectives "${COLLECTIVES_LIMIT:-420}" "${vr[@]}" "$B/collectives.test" -test.v -test.run "${COLLECTIVES_RUN:-GPU}" \
	-test.skip "${COLLECTIVES_SKIP:-GPUSoak}" -test.timeout 7m
if want benchtests; then
	step nccl-tests 120 "$B/nccl.test" -test.v -test.run '^TestGPU' -test.timeout 100s
	step bench-tests 420 "$B/bench.test" -test.v -test.run '^TestGPU' -test.timeout 7m
fi
if want ll; then
	llmax=${LL_MAXBYTES:-1M}
	[ "$sim" = 1 ] && llmax=${LL_MAXBYTES:-$maxb}
	for c in $COLLS; do
		known "$c" || { note "ll-$c: skipped: this nvls-bench has no -coll $c"; continue; }
		for ll in 0 65536; do
			step "ll-$c-$ll" 120 env "NVLS_LL_MAX=$ll" "$B/nvls-bench" -transport unicast "${ranks[@]}" -coll "$c" \
				-b 8 -e "$llmax" -f 2 -graph -json "$R/ll-$c-$ll.json"
		done
	done
fi
want sweep && step sweep "${SWEEP_LIMIT:-560}" env NVLS_BENCH="$B/nvls-bench" bench/gpu-sweep.sh "$R/sweep" "$g" "$maxb"
want sweep && grep -h '^gpu-sweep: .*: \(rc\|skipped\)' "$R/sweep.log" | tee -a "$R/summary.txt"
if want mpisweep; then
	if [ "$single" = 1 ] || [ "$sim" = 1 ]; then
		note "mpisweep: skipped (one process per GPU needs GPUS >= 2 and real GPUs)"
	else
		# shellcheck disable=SC2086 # MPI_ARGS is flags
		step mpisweep "${MPISWEEP_LIMIT:-300}" env MPI="$g" MPIRUN="${mpirun[*]} ${envs[*]}" \
			NVLS_BENCH="$B/nvls-bench" NVLS_BENCH_MPI="$B/nvls-bench-mpi" FACTOR="${MPI_FACTOR:-4}" \
			GRAPHS="${GRAPHS:-graph}" bench/gpu-sweep.sh "$R/mpisweep" "$g" "${MPI_MAXBYTES:-512M}" ${MPI_ARGS:-}
		grep -h '^gpu-sweep: .*: \(rc\|skipped\)' "$R/mpisweep.log" | tee -a "$R/summary.txt"
	fi
fi
if want variants && [ "$single" = 0 ] && [ "$sim" = 0 ]; then
	for c in ${VARIANT_COLLS:-allreduce}; do
		for v in ${VARIANTS:-base:}; do
			name=${v%%:*} kvs=${v#*:}
			venv=(-x NCCL_NVLS_ENABLE) restore=()
			# Each VAR=VALUE of the variant (several: comma-separated),
			# with the variable's value before it (e.g. the ptx step's
			# NVLS_PTX_DIR) restored after it.
			IFS=, read -r -a kva <<<"$kvs"
			for kv in "${kva[@]}"; do
				var=${kv%%=*}
				if [ -n "${!var+x}" ]; then restore+=("$var=${!var}"); else restore+=("$var"); fi
				export "${kv?}"
				venv+=(-x "$var")
			done
			step "variant-$name-$c" 120 "${mpirun[@]}" -np "$g" "${envs[@]}" "${venv[@]}" "$B/nvls-bench-mpi" -transport unicast \
				-coll "$c" -b "${VARIANT_MINBYTES:-8}" -e "${VARIANT_MAXBYTES:-32M}" -f "${VARIANT_FACTOR:-4}" ${VARIANT_ARGS:-} -graph -compare nccl -json "$R/variant-$name-$c.json"
			for kv in "${restore[@]}"; do
				if [ "$kv" != "${kv%%=*}" ]; then export "${kv?}"; else unset "$kv"; fi
			done
		done
	done
fi
if want launch && [ "$single" = 0 ]; then
	cmp=(-compare nccl)
	[ "$sim" = 1 ] && cmp=()
	for m in ${LAUNCH_MODES:-serial parallel workers}; do
		# shellcheck disable=SC2086 # LAUNCH_GRAPH is flags: "-graph" or "-G 10"
		step "launch-$m" 120 "$B/nvls-bench" -transport unicast "${ranks[@]}" ${LAUNCH_GRAPH:--graph} "${cmp[@]}" \
			-b 8 -e "${LAUNCH_MAXBYTES:-1M}" -f 4 -launch "$m" -json "$R/launch-$m.json"
	done
fi
if want eager && [ "$single" = 0 ]; then
	cmp=(-compare nccl)
	[ "$sim" = 1 ] && cmp=()
	for m in ${EAGER_MODES:-workers caller}; do
		step "eager-$m" 120 env "NVLS_LAUNCH=$m" "$B/nvls-bench" -transport unicast "${ranks[@]}" "${cmp[@]}" \
			-b 8 -e "${EAGER_MAXBYTES:-1M}" -f 4 -json "$R/eager-$m.json"
	done
fi
if want nvlink && [ "$single" = 0 ] && [ "$sim" = 0 ]; then
	# Link bytes per payload byte: nvidia-smi's NVLink data counters (KiB,
	# every link of every GPU) around an nvls-only run and a run with NCCL
	# beside; NCCL's bytes are the difference.
	# Per GPU too ("g0 tx rx, ..."): a reduce's root and the other ranks
	# carry different bytes.
	nvl() { nvidia-smi nvlink -gt d 2>&1 | awk '/^GPU [0-9]+:/{g = $2; sub(":", "", g); gs[g] = 1}
		/Data Tx:/{tx += $(NF-1); gt[g] += $(NF-1)} /Data Rx:/{rx += $(NF-1); gr[g] += $(NF-1)}
		END {printf "%d %d (", tx, rx; for (k in gs) printf "g%s %d %d; ", k, gt[k], gr[k]; printf ")\n"}'; }
	nvlc=${NVLINK_COLL:-allreduce} nvlb=${NVLINK_BYTES:-512M}
	a=$(nvl)
	step nvlink-nvls 120 "${mpirun[@]}" -np "$g" "${envs[@]}" "$B/nvls-bench-mpi" -transport unicast \
		-coll "$nvlc" -b "$nvlb" -e "$nvlb" -c 0 -w 2 -n 50 -graph -json "$R/nvlink-nvls.json"
	b=$(nvl)
	step nvlink-both 120 "${mpirun[@]}" -np "$g" "${envs[@]}" "$B/nvls-bench-mpi" -transport unicast \
		-coll "$nvlc" -b "$nvlb" -e "$nvlb" -c 0 -w 2 -n 50 -graph -compare nccl -json "$R/nvlink-both.json"
	c=$(nvl)
	note "nvlink: $nvlc $nvlb, KiB over all links of all GPUs (tx rx): before $a, after nvls $b, after nvls+nccl $c"
	nvidia-smi nvlink -gt d -i 0 2>&1 | head -n 8 >>"$R/nvlink-nvls.log"
fi
if want ncclsym; then
	if [ "$sim" = 1 ]; then
		note "ncclsym: skipped (SIM: no NCCL)"
	else
		# NCCL's tuning log names every symmetric kernel it launches.
		step ncclsym 300 env NCCL_DEBUG=INFO NCCL_DEBUG_SUBSYS=TUNING "$B/nvls-bench" -transport unicast -g "$ng" \
			-compare nccl -b 8 -e "${NCCLSYM_MAXBYTES:-256M}" -f 4 -json "$R/ncclsym.json"
		grep -h '^# NCCL' "$R/ncclsym.log" | tee -a "$R/summary.txt"
		note "ncclsym: NCCL launched a symmetric kernel $(grep -c '\[Symmetric\]' "$R/ncclsym.log") times (none with one rank: it copies locally)"
	fi
fi
if want mpi; then
	if [ "$single" = 1 ]; then
		note "mpi: skipped (one process per GPU needs GPUS >= 2)"
	elif [ "$sim" = 1 ]; then
		step mpi-test 200 "${mpirun[@]}" -np "$g" "${envs[@]}" "$B/mpi.test" -test.v -test.timeout 180s
		note "mpi-bench: skipped (SIM: nvls-bench-mpi's processes cannot share the simulated node)"
	else
		step mpi-test 200 "${mpirun[@]}" -np "$g" "${envs[@]}" "$B/mpi.test" -test.v -test.run GPU -test.timeout 180s
		step mpi-bench 200 "${mpirun[@]}" -np "$g" "${envs[@]}" "$B/nvls-bench-mpi" -transport unicast \
			-b 8 -e 64M -f 4 -compare nccl -json "$R/mpi-bench.json"
	fi
fi
# verdicts NAME LOG WANT: the test binary's per-rank lines in the
# summary, and the count of "NAME: rank R: PASS" against WANT.
verdicts() {
	local name=$1 log=$2 want=$3
	if grep -q -- '--- SKIP' "$log" && ! grep -q -- '--- PASS\|--- FAIL' "$log"; then
		note "$name: skipped by the test: $(grep -m1 -B1 -- '--- SKIP' "$log" | head -n1 | sed 's/^ *//')"
		return
	fi
	grep -E "^(rankkill|closeinflight|soak): rank [0-9]+ \(device" "$log" | tee -a "$R/summary.txt"
	grep -E "^(rankkill|soak): rank [0-9]+: (descriptors|wrong)" "$log" | head -n 20 | tee -a "$R/summary.txt"
	local pass
	pass=$(grep -c "^rankkill: rank [0-9]*: PASS$" "$log")
	note "$name: $pass rank(s) PASS (want $want): $([ "$pass" = "$want" ] && echo PASS || echo FAIL)"
}
if want rankkill; then
	if [ "$single" = 1 ]; then
		note "rankkill: skipped (one process per GPU needs GPUS >= 2)"
	elif [ "$sim" = 1 ]; then
		step rankkill 200 "${mpirun[@]}" --enable-recovery -np "$g" "${envs[@]}" "$B/rankkill.test" \
			-test.v -test.run '^TestBootstrapRankKill$' -test.timeout 180s
		verdicts rankkill "$R/rankkill.log" "$((g - 1))"
		step rankkill-sim 200 "$B/rankkill.test" -test.v -test.run '^TestSimRankKill$' -test.timeout 180s
		grep -E "^ +sim_test.go:[0-9]+: rankkill: rank" "$R/rankkill-sim.log" | sed 's/^ *sim_test.go:[0-9]*: //' | tee -a "$R/summary.txt"
	else
		step rankkill 200 "${mpirun[@]}" --enable-recovery -np "$g" "${envs[@]}" "$B/rankkill.test" \
			-test.v -test.run '^TestGPURankKill$' -test.timeout 180s
		verdicts rankkill "$R/rankkill.log" "$((g - 1))"
		step rankkill-graph 200 "${mpirun[@]}" --enable-recovery -np "$g" "${envs[@]}" "$B/rankkill.test" \
			-test.v -test.run '^TestGPUGraphRankKill$' -test.timeout 180s
		verdicts rankkill-graph "$R/rankkill-graph.log" "$((g - 1))"
	fi
fi
if want closeinflight; then
	if [ "$single" = 1 ]; then
		note "closeinflight: skipped (one process per GPU needs GPUS >= 2)"
	elif [ "$sim" = 1 ]; then
		step closeinflight 120 "$B/rankkill.test" -test.v -test.run '^TestSimCloseInFlight$' -test.timeout 100s
		grep -E "^ +closeinflight_test.go:[0-9]+: closeinflight: rank" "$R/closeinflight.log" | sed 's/^ *closeinflight_test.go:[0-9]*: //' | tee -a "$R/summary.txt"
	else
		step closeinflight 150 "${mpirun[@]}" -np "$g" "${envs[@]}" "$B/rankkill.test" \
			-test.v -test.run '^TestGPUCloseInFlight$' -test.timeout 140s
		verdicts closeinflight "$R/closeinflight.log" "$g"
	fi
fi
if want mismatch; then
	if [ "$single" = 1 ]; then
		note "mismatch: skipped (one process per GPU needs GPUS >= 2)"
	elif [ "$sim" = 1 ]; then
		step mismatch 120 "$B/rankkill.test" -test.v -test.run '^TestSimArgMismatch$' -test.timeout 100s
	else
		step mismatch 240 "${mpirun[@]}" -np "$g" "${envs[@]}" "$B/rankkill.test" \
			-test.v -test.run '^TestGPUArgMismatchMPI$' -test.timeout 220s
		grep -E "^mismatch: rank [0-9]+: .*: FAIL" "$R/mismatch.log" | head -n 20 | tee -a "$R/summary.txt"
		note "mismatch: $(grep -cE '^mismatch: rank [0-9]+: .*: PASS' "$R/mismatch.log") rank-case(s) PASS, $(grep -cE '^mismatch: rank [0-9]+: .*: FAIL' "$R/mismatch.log") FAIL"
	fi
fi
if want soak; then
	if [ "$sim" = 1 ] && [ "$single" = 0 ]; then
		step soak 200 "$B/rankkill.test" -test.v -test.run '^TestSimSoak$' -test.timeout 180s
		grep -E "^ +soak_test.go:[0-9]+: soak: rank" "$R/soak.log" | sed 's/^ *soak_test.go:[0-9]*: //' | tee -a "$R/summary.txt"
	elif [ "$single" = 1 ]; then
		d=${SOAK_DURATION:-9m}
		step soak 590 env "NVLS_SOAK_DURATION=$d" "${vr[@]}" "$B/collectives.test" -test.v -test.run GPUSoak -test.timeout 10m
		grep -E 'soak|#wrong' "$R/soak.log" | tail -n 3 | tee -a "$R/summary.txt"
	else
		# What DEADLINE leaves, less the bring-up, the teardown and the
		# archive.
		left=$((deadline - ($(date +%s) - t0)))
		d=${SOAK_DURATION:-$((left > 75 ? left - 45 : 30))s}
		step soak "$left" "${mpirun[@]}" -np "$g" "${envs[@]}" -x NVLS_SOAK_DURATION="$d" "$B/rankkill.test" \
			-test.v -test.run '^TestGPUSoakMPI$' -test.timeout "$((left))s"
		verdicts soak "$R/soak.log" "$g"
		note "soak: asked for $d"
	fi
fi
if want shim; then
	if [ "$sim" = 1 ] || [ "$single" = 1 ]; then
		note "shim: skipped (needs GPUS >= 2 real GPUs, nvcc and the real NCCL)"
	else
		mkdir -p "$R/shim"
		# nccl-tests gets what the deadline leaves after PyTorch's share.
		tl=${SHIM_TORCH_LIMIT:-200} sl=${SHIM_LIMIT:-320}
		[ "${SHIM_TORCH:-1}" = 0 ] && tl=0
		left=$((deadline - ($(date +%s) - t0)))
		[ $((left - tl - 15)) -lt "$sl" ] && sl=$((left - tl - 15))
		if [ "$sl" -lt 20 ]; then
			note "shim-nccl-tests: skipped: the DEADLINE leaves it ${sl} s (SHIM_TORCH_LIMIT ${tl} s is kept for PyTorch)"
		else
			step shim-nccl-tests $((sl + 15)) env SHIM="$B/libnccl-nvls.so" NGPUS="$g" SHIM_OUT="$R/shim" \
				SHIM_LIMIT="$sl" MPI_INC_FALLBACK="$B/mpi-include" MPIRUN="${mpirun[*]}" \
				NCCL_TESTS="${NCCL_TESTS:-.nccl-tests}" scripts/shim-device.sh
			grep -v '^$' "$R/shim/summary.txt" 2>/dev/null | tee -a "$R/summary.txt"
		fi
		py=${SHIM_PYTHON:-python3}
		[ -z "${SHIM_PYTHON:-}" ] && [ -x /opt/torch/.venv/bin/python3 ] && py=/opt/torch/.venv/bin/python3
		if [ "$tl" -gt 0 ]; then
			step shim-torch "$tl" "$py" scripts/shim-torch.py --shim "$B/libnccl-nvls.so" \
				--nproc "$g" --out "$R/shim" --timeout $(((tl - 10) / 2))
			grep '^shim-torch\|^   - ' "$R/shim-torch.log" | head -n 60 | tee -a "$R/summary.txt"
		else
			note "shim-torch: skipped (SHIM_TORCH=0)"
		fi
	fi
fi
if want simdiff; then
	step simdiff 200 "$B/simdiff.test" -test.v -test.run GPUDiff -diff.seed "${DIFF_SEED:-1}" -diff.seqs "${DIFF_SEQS:-300}"
	grep -E '^simdiff:|^difference|^differences by|^ +[0-9]+  ' "$R/simdiff.log" | head -n 40 | tee -a "$R/summary.txt"
fi
# r.tgz holds every run's directory of this call ($OUT/r and those RUN
# named).
runs=$(cd "$OUT" && find . -mindepth 2 -maxdepth 2 -name summary.txt -printf '%h\n' | sed 's|^\./||' | sort -u)
tar czf "$OUT/r.tgz" -C "$OUT" ${runs:-$(basename "$R")}
