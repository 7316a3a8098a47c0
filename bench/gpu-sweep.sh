#!/usr/bin/env bash
# The nvls-bench runs of issues 5 and 9 on a GPU machine: all-reduce (float
# and bfloat16) and broadcast, 8 B to 4 GiB, with and without -graph, NCCL
# alongside on the same buffers, unicast transport only (never multicast on
# the shared GPU machines). Each run writes OUTDIR/<name>.json, .svg and .txt.
#
#   bench/gpu-sweep.sh OUTDIR [GPUS] [MAXBYTES] [extra nvls-bench flags...]
#
# GPUS defaults to 4, MAXBYTES to 4G. NVLS_BENCH names the binary
# (default ./bin/nvls-bench, built with CGO_ENABLED=0 go build -o bin/nvls-bench ./bench).
# ONLY="allreduce-f32 broadcast-f32-graph" runs just those (names as in
# the output files), e.g. one per device call.
# NCCL_NVLS_ENABLE must be 0 (NCCL's NVLink SHARP off): the script refuses
# otherwise rather than change it behind your back.
set -euo pipefail
out=${1:?usage: bench/gpu-sweep.sh OUTDIR [GPUS] [MAXBYTES] [flags...]}
gpus=${2:-4}
maxb=${3:-4G}
shift $(( $# < 3 ? $# : 3 ))
bin=${NVLS_BENCH:-./bin/nvls-bench}
if [ "${NCCL_NVLS_ENABLE:-}" != "0" ]; then
	echo "gpu-sweep: NCCL_NVLS_ENABLE is '${NCCL_NVLS_ENABLE:-unset}': set NCCL_NVLS_ENABLE=0 (no multicast on shared GPU machines; like-for-like with nvls unicast)" >&2
	exit 2
fi
mkdir -p "$out"
runs=(
	"allreduce-f32:-coll allreduce -d float"
	"allreduce-bf16:-coll allreduce -d bfloat16"
	"broadcast-f32:-coll broadcast -d float"
)
status=0
for r in "${runs[@]}"; do
	name=${r%%:*}
	flags=${r#*:}
	for graph in "" "-graph"; do
		tag=$name${graph:+-graph}
		if [ -n "${ONLY:-}" ] && [[ " $ONLY " != *" $tag "* ]]; then
			continue
		fi
		echo "gpu-sweep: $tag ($gpus GPUs, 8 B to $maxb)" >&2
		start=$(date +%s)
		# shellcheck disable=SC2086
		if ! "$bin" -transport unicast -g "$gpus" -b 8 -e "$maxb" -f 2 $flags $graph -compare nccl \
			-json "$out/$tag.json" -plot "$out/$tag.svg" "$@" >"$out/$tag.txt"; then
			echo "gpu-sweep: $tag FAILED (see $out/$tag.txt)" >&2
			status=1
		fi
		echo "gpu-sweep: $tag took $(( $(date +%s) - start )) s" >&2
	done
done
exit $status
