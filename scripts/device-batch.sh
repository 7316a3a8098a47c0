#!/usr/bin/env bash
# Sourced by a device call's batch script (docs/runs/*/runNN.sh) to run
# scripts/device-run.sh several times in one call, within one budget:
#
#   source scripts/device-batch.sh
#   dr px 4 STEPS=ptx
#   dr v2 2 CUDA_VISIBLE_DEVICES=0,1 STEPS=variants VARIANTS="a: b:X=1"
#   batch_pack px v2     # $OUT/r.tgz: those run directories and the logs
#
# dr RUN GPUS [VAR=VALUE...]: device-run.sh with GPUS ranks and the
# variables, its results in $OUT/RUN (RUN=RUN), its output in $OUT/RUN.log,
# with what is left of BUDGET (seconds from sourcing, default 570) as its
# DEADLINE; skipped with under 40 s left. Prints a line with the exit
# status and the time, then the run's summary. The multicast switches are
# exported here too (DEVELOPERS.md's safety rule), and the unicast
# transport.
export NCCL_NVLS_ENABLE=0 TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1 NVLS_ENABLE=0 NVLS_TRANSPORT=unicast
: "${OUT:?OUT must name the directory whose files come back}"
batch_t0=$(date +%s)
batch_left() { echo $((${BUDGET:-570} - ($(date +%s) - batch_t0))); }
dr() {
	local run=$1 g=$2 l
	shift 2
	l=$(batch_left)
	if [ "$l" -lt 40 ]; then
		echo "$run: skipped, $l s left"
		return 0
	fi
	env "$@" RUN="$run" DEADLINE="$l" "$(dirname "${BASH_SOURCE[0]}")/device-run.sh" "$g" >"$OUT/$run.log" 2>&1
	echo "== $run rc=$? at $(($(date +%s) - batch_t0)) s"
	cut -c1-300 "$OUT/$run/summary.txt" 2>/dev/null
	return 0
}
# batch_pack RUN...: the run directories and every RUN.log into $OUT/r.tgz
# (the device tool returns few files), the logs then removed from $OUT.
batch_pack() {
	(cd "$OUT" && tar czf r.tgz "$@" ./*.log && rm -f ./*.log)
	ls -la "$OUT"
}
