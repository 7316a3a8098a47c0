#!/usr/bin/env bash
# shim-device.sh: NVIDIA's nccl-tests through libnccl-nvls (LD_PRELOAD)
# and through the real NCCL, side by side, on a GPU machine: the nccl-tests
# half of scripts/device-run.sh's shim step (STEPS=shim), also usable alone.
# Unicast only: NVLS_TRANSPORT must be unicast and NCCL_NVLS_ENABLE 0 (it
# refuses otherwise); never nccl-tests' -D (device kernels; -D 3 and 4 are
# multimem).
#
# nccl-tests is a checkout carried to the machine (it reaches no network):
# NCCL_TESTS (default .nccl-tests), fetched on the dev machine into that
# ignored folder and never committed. It is built here with MPI=1 against
# the real NCCL's nccl.h, for sm_90 only (NVCC_GENCODE), or taken prebuilt
# from NCCL_TESTS_BIN.
#
#   SHIM=.devbin/bins/libnccl-nvls.so NGPUS=4 SHIM_OUT=out/shim scripts/shim-device.sh
#
# Optional: REAL_NCCL (libnccl.so.2; default: the loader's, else PyTorch's
# wheel), NCCL_INC (the folder of its nccl.h), MPI_INC (mpi.h's folder,
# default the machine's, else the copy in .devbin: MPI_INC_FALLBACK),
# MPIRUN (the launcher with its flags, default mpirun --allow-run-as-root --bind-to none),
# SHIM_LIMIT (seconds for all of it, default 300), RUN_LIMIT (seconds per
# run, default 60), MAXBYTES (default 128M), COLLS (nccl-tests names).
#
# Results in SHIM_OUT: build.log, one log per run (NAME.txt), runs.tsv
# (one line per run), summary.txt (also printed): per collective, mode and
# graph setting the shim's and NCCL's #wrong, time at 8 B and bus
# bandwidth at MAXBYTES, and the shim's ran-here/forwarded counts of the
# coverage runs (-d all -o all under NVLS_DEBUG=INFO).
set -uo pipefail
cd "$(dirname "$0")/.."
SHIM=${SHIM:?SHIM names libnccl-nvls.so}
NGPUS=${NGPUS:-4}
O=${SHIM_OUT:?SHIM_OUT names the results folder}
NCCL_TESTS=${NCCL_TESTS:-.nccl-tests}
CUDA_HOME=${CUDA_HOME:-/usr/local/cuda}
LIMIT=${SHIM_LIMIT:-300}
RUN_LIMIT=${RUN_LIMIT:-60}
MAXBYTES=${MAXBYTES:-128M}
COLLS=${SHIM_COLLS:-all_reduce all_gather reduce_scatter broadcast reduce}
read -r -a MPIRUN <<<"${MPIRUN:-mpirun --allow-run-as-root --bind-to none}"
t0=$(date +%s)
mkdir -p "$O"
: >"$O/summary.txt"
say() { echo "$*" | tee -a "$O/summary.txt"; }

if [ "${NVLS_TRANSPORT:-}" != unicast ] || [ "${NCCL_NVLS_ENABLE:-}" != 0 ]; then
	say "shim: refused: NVLS_TRANSPORT=unicast and NCCL_NVLS_ENABLE=0 must be exported (multicast never runs here)"
	exit 2
fi
export TORCH_SYMM_MEM_DISABLE_MULTICAST=1 NVSHMEM_DISABLE_NVLS=1
[ -f "$SHIM" ] || { say "shim: no $SHIM (make devbin puts libnccl-nvls.so in .devbin/bins.txz)"; exit 2; }
SHIM=$(readlink -f "$SHIM")

# The real NCCL: REAL_NCCL, else the loader's libnccl.so.2, else the one
# in PyTorch's wheel; its nccl.h beside it or in the usual places.
pywheel=$(ls -d /opt/torch/.venv/lib/python3*/site-packages/nvidia/nccl 2>/dev/null | head -n1)
real=${REAL_NCCL:-$(ldconfig -p 2>/dev/null | awk '/libnccl\.so\.2 /{print $NF; exit}')}
[ -z "$real" ] && [ -n "$pywheel" ] && real=$pywheel/lib/libnccl.so.2
[ -f "$real" ] || { say "shim: no real NCCL (REAL_NCCL=${REAL_NCCL:-}, ldconfig, $pywheel)"; exit 2; }
real=$(readlink -f "$real")
inc=${NCCL_INC:-}
if [ -z "$inc" ]; then
	for d in "$(dirname "$real")/../include" /usr/include /usr/local/include /usr/local/nccl/include "$CUDA_HOME/include" ${pywheel:+"$pywheel/include"}; do
		[ -f "$d/nccl.h" ] && { inc=$(readlink -f "$d"); break; }
	done
fi
[ -n "$inc" ] || { say "shim: no nccl.h (NCCL_INC)"; exit 2; }
hver=$(awk '/^#define NCCL_(MAJOR|MINOR|PATCH) /{printf "%s.", $3}' "$inc/nccl.h" | sed 's/\.$//')
say "shim: real NCCL $real (nccl.h $hver in $inc); shim $SHIM"
W=$(mktemp -d)
trap 'rm -rf "$W"' EXIT
# LD_LIBRARY_PATH: the binaries find this same libnccl.so.2.
export LD_LIBRARY_PATH=$(dirname "$real")${LD_LIBRARY_PATH:+:$LD_LIBRARY_PATH}

# The binaries: built from the carried checkout unless NCCL_TESTS_BIN.
bins=${NCCL_TESTS_BIN:-}
if [ -z "$bins" ]; then
	[ -f "$NCCL_TESTS/src/Makefile" ] || { say "shim: no nccl-tests checkout at $NCCL_TESTS (NCCL_TESTS)"; exit 2; }
	mkdir -p "$W/nccl/lib" "$W/mpi/lib"
	ln -s "$inc" "$W/nccl/include"
	ln -s "$real" "$W/nccl/lib/libnccl.so"
	mpiinc=${MPI_INC:-}
	if [ -z "$mpiinc" ]; then
		for d in $(mpicc --showme:incdirs 2>/dev/null) /usr/lib/x86_64-linux-gnu/openmpi/include /usr/include/openmpi /usr/local/include; do
			[ -f "$d/mpi.h" ] && { mpiinc=$d; break; }
		done
	fi
	[ -z "$mpiinc" ] && mpiinc=${MPI_INC_FALLBACK:-}
	libmpi=$(ldconfig -p 2>/dev/null | awk '/libmpi\.so\.40 /{print $NF; exit}')
	[ -z "$libmpi" ] && libmpi=$(ls /usr/lib/x86_64-linux-gnu/libmpi.so.40 /usr/local/lib/libmpi.so.40 2>/dev/null | head -n1)
	if [ ! -f "$mpiinc/mpi.h" ] || [ -z "$libmpi" ]; then
		say "shim: no MPI to build nccl-tests with (mpi.h: ${mpiinc:-none}, libmpi.so.40: ${libmpi:-none})"
		exit 2
	fi
	ln -s "$(readlink -f "$mpiinc")" "$W/mpi/include"
	ln -s "$libmpi" "$W/mpi/lib/libmpi.so"
	cp -r "$NCCL_TESTS" "$W/src"
	targets=()
	for c in $COLLS; do targets+=("$W/build/${c}_perf"); done
	s=$(date +%s)
	# OMPI_SKIP_MPICXX: no C++ bindings (nothing but libmpi is linked).
	NVCC_APPEND_FLAGS="-DOMPI_SKIP_MPICXX=1 -DMPICH_SKIP_MPICXX=1" timeout $((LIMIT / 2)) \
		make -C "$W/src/src" -j "$(nproc)" MPI=1 MPI_HOME="$W/mpi" NCCL_HOME="$W/nccl" CUDA_HOME="$CUDA_HOME" \
		NVCC_GENCODE="${NVCC_GENCODE:--gencode=arch=compute_90,code=sm_90}" BUILDDIR="$W/build" "${targets[@]}" >"$O/build.log" 2>&1
	rc=$?
	say "shim: nccl-tests $(sed -n 's/.*NCCL_TESTS_VERSION *\([0-9.]*\).*/\1/p' "$NCCL_TESTS/src/common.h" "$NCCL_TESTS"/src/*.h 2>/dev/null | head -n1) built in $(($(date +%s) - s)) s, rc $rc (mpi.h $mpiinc, $libmpi)"
	if [ "$rc" != 0 ]; then
		tail -n 15 "$O/build.log" | tee -a "$O/summary.txt"
		exit 1
	fi
	bins=$W/build
fi

# The NCCL symbols a binary takes that the shim does not export go to the
# real NCCL with the shim's communicator: name them (there should be none
# that take a communicator).
if command -v nm >/dev/null 2>&1; then
	nm -D --defined-only "$SHIM" | awk '$3 ~ /^nccl/{print $3}' | sort -u >"$W/exported"
	miss=$(nm -D --undefined-only "$bins/all_reduce_perf" | awk '$2 ~ /^nccl/{print $2}' | sort -u | comm -23 - "$W/exported" | tr '\n' ' ')
	say "shim: NCCL symbols nccl-tests uses that the shim does not export: ${miss:-none}"
fi

left() { echo $((LIMIT - ($(date +%s) - t0))); }
printf 'name\trc\tseconds\n' >"$O/runs.tsv"
# one NAME LIB CMD...: a run, LIB shim or nccl; at most RUN_LIMIT seconds,
# none with under 10 s left.
one() {
	local name=$1 lib=$2 l s rc pre=()
	shift 2
	l=$(left)
	if [ "$l" -lt 10 ]; then
		printf '%s\tskipped\t0\n' "$name" >>"$O/runs.tsv"
		return
	fi
	[ "$l" -gt "$RUN_LIMIT" ] && l=$RUN_LIMIT
	if [ "$lib" = shim ]; then
		pre=(env LD_PRELOAD="$SHIM" NVLS_REAL_NCCL="$real")
	fi
	s=$(date +%s)
	timeout -k 5 "$l" "${pre[@]}" "$@" >"$O/$name.txt" 2>&1
	rc=$?
	printf '%s\t%s\t%s\n' "$name" "$rc" "$(($(date +%s) - s))" >>"$O/runs.tsv"
	# A failed run's last lines, for the record (its log may not come back).
	if [ "$rc" != 0 ]; then
		{
			echo "== $name: rc $rc, its last lines:"
			grep -v '^#  *[0-9]' "$O/$name.txt" | tail -n "${FAIL_TAIL:-25}"
		} >>"$O/failed-tails.txt"
	fi
}
# perf COLL MODE G: the shim's run and NCCL's, MODE g (one process, -g
# NGPUS) or np (mpirun -np NGPUS, -g 1).
perf() {
	local c=$1 m=$2 G=$3 lib args=(-b 8 -e "$MAXBYTES" -f 4 -c 1 -G "$3" -n 20 -w 5)
	for lib in shim nccl; do
		if [ "$m" = g ]; then
			one "$c-g$NGPUS-G$G-$lib" "$lib" "$bins/${c}_perf" -g "$NGPUS" "${args[@]}"
		else
			local x=()
			[ "$lib" = shim ] && x=(-x LD_PRELOAD="$SHIM" -x NVLS_REAL_NCCL="$real")
			[ "$lib" = shim ] && [ -n "${NVLS_WORKSPACE:-}" ] && x+=(-x NVLS_WORKSPACE)
			one "$c-np$NGPUS-G$G-$lib" mpi "${MPIRUN[@]}" -np "$NGPUS" -x NCCL_NVLS_ENABLE -x NVLS_TRANSPORT \
				-x TORCH_SYMM_MEM_DISABLE_MULTICAST -x NVSHMEM_DISABLE_NVLS -x LD_LIBRARY_PATH "${x[@]}" \
				"$bins/${c}_perf" -g 1 "${args[@]}"
		fi
	done
}
# cover COLL: every type (and operator) through the shim with its INFO
# log, small sizes: what runs here and what is forwarded, checked.
cover() {
	local c=$1 o=()
	case $c in all_reduce | reduce_scatter | reduce) o=(-o all) ;; esac
	one "$c-g$NGPUS-all-shim" shim env NVLS_DEBUG=INFO NCCL_DEBUG=WARN "$bins/${c}_perf" -g "$NGPUS" -b 8 -e 1M -f 32 -d all "${o[@]}" -c 1 -n 2 -w 1
	# The same through mpirun, one process per GPU.
	one "$c-np$NGPUS-all-shim" mpi "${MPIRUN[@]}" -np "$NGPUS" -x NCCL_NVLS_ENABLE -x NVLS_TRANSPORT \
		-x TORCH_SYMM_MEM_DISABLE_MULTICAST -x NVSHMEM_DISABLE_NVLS -x LD_LIBRARY_PATH -x LD_PRELOAD="$SHIM" \
		-x NVLS_REAL_NCCL="$real" -x NVLS_DEBUG=INFO -x NCCL_DEBUG=WARN ${NVLS_WORKSPACE:+-x NVLS_WORKSPACE} \
		"$bins/${c}_perf" -g 1 -b 8 -e 1M -f 32 -d all "${o[@]}" -c 1 -n 2 -w 1
}
# SHIM_PARTS picks the parts, in this order: perf1 (-G 1), cover (-d all
# -o all), perf0 (-G 0).
parts=" ${SHIM_PARTS:-perf1 cover perf0} "
: >"$O/failed-tails.txt"
[[ $parts == *" perf1 "* ]] && for c in $COLLS; do for m in np g; do perf "$c" "$m" 1; done; done
[[ $parts == *" cover "* ]] && for c in $COLLS; do cover "$c"; done
[[ $parts == *" perf0 "* ]] && for c in $COLLS; do for m in np g; do perf "$c" "$m" 0; done; done
if [ -s "$O/failed-tails.txt" ]; then
	say "shim: the failed runs' last lines:"
	head -c "${FAIL_TAILS_BYTES:-12000}" "$O/failed-tails.txt" | tee -a "$O/summary.txt"
fi

python3 scripts/shim-summary.py "$O" "$NGPUS" "$MAXBYTES" | tee -a "$O/summary.txt"
exit "${PIPESTATUS[0]}"
