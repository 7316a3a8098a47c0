#!/usr/bin/env bash
# The nvls-bench sweeps of the node run (issues 5, 9 and 17): every
# collective of COLLS in every type of DTYPES, 8 B to MAXBYTES, with and
# without -graph, NCCL alongside on the same buffers (and on its symmetric
# memory where the NCCL has it), unicast transport only (never multicast
# on the shared GPU machines). Each run writes OUTDIR/<tag>.json, .svg and
# .txt, <tag> being <coll>-<type>[-graph] (allreduce-f32-graph), and
# prints one line per run on stderr.
#
#   bench/gpu-sweep.sh OUTDIR [GPUS] [MAXBYTES] [extra nvls-bench flags...]
#
# GPUS defaults to 4, MAXBYTES to 4G. The environment picks the rest:
#   NVLS_BENCH  the binary (default ./bin/nvls-bench, built with
#               CGO_ENABLED=0 go build -o bin/nvls-bench ./bench)
#   COLLS       default "allreduce broadcast reducescatter allgather reduce";
#               those the binary run (nvls-bench, or nvls-bench-mpi with
#               MPI set) does not know are skipped, saying so
#   DTYPES      default "f32 bf16"; the collectives of ONE_TYPE (default
#               "broadcast allgather": they move bytes, whatever the type)
#               run in the first only
#   GRAPHS      default "plain graph": without and with -graph
#   ONLY        "allreduce-f32 broadcast-f32-graph" runs just those tags
#               (e.g. a few per device call, to stay within its limit)
#   MPI=N       one process per GPU: mpirun -np N of NVLS_BENCH_MPI (default
#               ./bin/nvls-bench-mpi; MPIRUN names the launcher and its flags,
#               default "mpirun --allow-run-as-root --bind-to none"); GPUS is ignored
#   FACTOR      the size factor (-f; default 2)
#   VRANKS=N    N ranks sharing GPU 0 (-g 1 -ranks N; GPUS is ignored): the
#               single-GPU mode, with the copy roofline column and no NCCL
#               (NCCL cannot run several ranks on one GPU)
#   SIM=1       on the simulated node (-sim; GPUS simulated GPUs), no NCCL:
#               to try the script where there is no GPU
# NCCL_NVLS_ENABLE must be 0 (NCCL's NVLink SHARP off): the script refuses
# otherwise rather than change it behind your back.
set -euo pipefail
out=${1:?usage: bench/gpu-sweep.sh OUTDIR [GPUS] [MAXBYTES] [flags...]}
gpus=${2:-4}
maxb=${3:-4G}
shift $(($# < 3 ? $# : 3))
bin=${NVLS_BENCH:-./bin/nvls-bench}
colls=${COLLS:-allreduce broadcast reducescatter allgather reduce}
dtypes=${DTYPES:-f32 bf16}
one_type=${ONE_TYPE:-broadcast allgather}
graphs=${GRAPHS:-plain graph}
if [ "${NCCL_NVLS_ENABLE:-}" != "0" ]; then
	echo "gpu-sweep: NCCL_NVLS_ENABLE is '${NCCL_NVLS_ENABLE:-unset}': set NCCL_NVLS_ENABLE=0 (no multicast on shared GPU machines; like-for-like with nvls unicast)" >&2
	exit 2
fi
# Where the ranks run, and NCCL beside them where it can run.
ranks=(-g "$gpus")
nccl=(-compare nccl)
what="$gpus GPUs"
if [ -n "${VRANKS:-}" ]; then
	ranks=(-g 1 -ranks "$VRANKS")
	nccl=()
	what="$VRANKS ranks on GPU 0, no NCCL"
fi
if [ "${SIM:-0}" = 1 ]; then
	ranks=(-sim "${ranks[@]}")
	nccl=()
	what="$what, simulated, no NCCL"
fi
launch=()
if [ -n "${MPI:-}" ]; then
	bin=${NVLS_BENCH_MPI:-./bin/nvls-bench-mpi}
	read -r -a launch <<<"${MPIRUN:-mpirun --allow-run-as-root --bind-to none}"
	launch+=(-np "$MPI" -x NCCL_NVLS_ENABLE -x TORCH_SYMM_MEM_DISABLE_MULTICAST -x NVSHMEM_DISABLE_NVLS)
	ranks=()
	what="$MPI processes, one GPU each"
fi
where=("${ranks[@]}" "${nccl[@]}")
mkdir -p "$out"

# known COLL: whether the binary the sweep runs has the collective (-coll
# X -h exits 0 for a known one, 2 for another): with MPI set,
# nvls-bench-mpi, which may be the only one there (run 118 asked an
# absent nvls-bench and skipped every sweep).
known() { "$bin" -coll "$1" -h >/dev/null 2>&1; }

# wanted TAG: whether ONLY (if set) names it.
wanted() { [ -z "${ONLY:-}" ] || [[ " $ONLY " == *" $1 "* ]]; }

# sweep TAG FLAGS...: one run, its result in $out/TAG.*; returns nonzero
# when it failed.
sweep() {
	local tag=$1 start rc=0
	shift
	echo "gpu-sweep: $tag ($what, 8 B to $maxb)" >&2
	start=$(date +%s)
	"${launch[@]}" "$bin" -transport unicast "${where[@]}" -b 8 -e "$maxb" -f "${FACTOR:-2}" "$@" \
		-json "$out/$tag.json" -plot "$out/$tag.svg" >"$out/$tag.txt" 2>"$out/$tag.err" || rc=$?
	echo "gpu-sweep: $tag: rc $rc, $(($(date +%s) - start)) s, $(grep -h '^# Out of bounds' "$out/$tag.txt" | cut -c3-)" >&2
	[ "$rc" = 0 ] || { tail -n 3 "$out/$tag.err" >&2; return 1; }
}

status=0
for c in $colls; do
	if ! known "$c"; then
		echo "gpu-sweep: $c: skipped: this nvls-bench has no -coll $c" >&2
		continue
	fi
	types=$dtypes
	[[ " $one_type " == *" $c "* ]] && types=${dtypes%% *}
	for d in $types; do
		for g in $graphs; do
			tag=$c-$d
			flags=(-coll "$c" -d "$d")
			if [ "$g" = graph ]; then
				tag=$tag-graph
				flags+=(-graph)
			fi
			wanted "$tag" || continue
			sweep "$tag" "${flags[@]}" "$@" || status=1
		done
	done
done
exit $status
