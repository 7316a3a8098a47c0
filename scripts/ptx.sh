#!/usr/bin/env bash
# Generates the committed PTX of package ptx from kernels/*.cu, both flavors,
# and checks it with ptxas (and, for the multicast flavor, the SASS with
# cuobjdump). Runs where the CUDA toolkit is (the GPU machine); needs only
# bash, nvcc, ptxas, cuobjdump, sha256sum, sed, grep, awk.
#
# Usage: scripts/ptx.sh OUTDIR      (make ptx runs: scripts/ptx.sh ptx)
# NVCC_FLAGS (an experiment's, e.g. -DNVLS_SPAN_UNROLL=4) go to nvcc; PTX
# made with them is for NVLS_PTX_DIR on the device, never committed.
#
# For each kernels/<src>.cu and flavor (uc: -DNVLS_MULTICAST=0, mc: =1) it
# writes OUTDIR/<src>_<flavor>.ptx:
#   1. nvcc -ptx -arch=sm_90 -DNVLS_MULTICAST=<0|1>
#   2. nvcc's `.pragma "used_bytes_mask"` hints (PTX ISA 8.3) are dropped;
#      the .version line is lowered to the oldest PTX ISA version ptxas
#      accepts for the file (trying upwards from 7.8, the oldest for sm_90;
#      multimem needs 8.1 and .acc::f32 8.2, so ptxas settles there), never
#      above what nvcc wrote;
#   3. a first line of provenance is prepended:
#      // nvls-ptx source=kernels/<src>.cu source_sha256=<sha256 of the .cu>
#      //   header=kernels/nvls.h header_sha256=<sha256 of nvls.h> flavor=<uc|mc>
#      //   ptx_version=<x.y> nvcc=<nvcc version>        (all on one line)
#      A Go test (ptx/ptx_test.go) recomputes both sha256s and fails when
#      either source changed and its PTX did not.
#   4. ptxas -arch=sm_90 must accept the final file (with -v: registers,
#      spills are reported);
#   5. multicast flavor: the PTX must hold multimem.st.u64 (the start
#      barrier's arrival word) and, but for the barrier kernel (start
#      barrier only), multimem.red (the end barrier's arrival), and
#      multimem.st where the source stores to all ranks (allreduce,
#      broadcast, allgather); the multicast PTX of the reducing sources
#      (allreduce, reducescatter, reduce) must hold multimem.ld_reduce and
#      .acc::f32 and their SASS the multimem loads (LDGMC); the unicast
#      flavor must hold no multimem instruction.
# Exits non-zero on the first failure; prints a summary.
set -euo pipefail

if [[ $# -ne 1 ]]; then
  echo "usage: $0 OUTDIR" >&2
  exit 2
fi
mkdir -p "$1"
out=$(cd "$1" && pwd)
cd "$(dirname "$0")/.."

for tool in nvcc ptxas cuobjdump sha256sum; do
  command -v "$tool" >/dev/null 2>&1 || { echo "ptx.sh: $tool not found (run on a machine with the CUDA toolkit)" >&2; exit 1; }
done

arch=sm_90
nvcc_version=$(nvcc --version | sed -n 's/.*release [0-9.]*, V\([0-9.]*\).*/\1/p' | head -n1)
[[ -n "$nvcc_version" ]] || nvcc_version=unknown
header=kernels/nvls.h
header_sha=$(sha256sum "$header" | awk '{print $1}')
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT

# Candidate .version values, oldest first (ptxas of the installed toolkit
# decides which it accepts).
versions="7.8 8.0 8.1 8.2 8.3 8.4 8.5 8.6 8.7 8.8 9.0 9.1 9.2"

# version_le A B: A <= B for x.y strings.
version_le() {
  local a1=${1%.*} a2=${1#*.} b1=${2%.*} b2=${2#*.}
  (( a1 < b1 || (a1 == b1 && a2 <= b2) ))
}

fail() { echo "ptx.sh: FAIL: $*" >&2; exit 1; }

# one CU FLAVOR: writes $out/<src>_<flavor>.ptx and its summary line to
# $tmp/<src>_<flavor>.sum. The twelve run side by side (each nvcc and
# ptxas is one thread; run one after another they took 2.5-3 minutes).
one() {
  local cu=$1 flavor=$2 src src_sha mcflag raw orig chosen v dst cubin t log regs spills stack entries ldgmc
  src=$(basename "$cu" .cu)
  src_sha=$(sha256sum "$cu" | awk '{print $1}')
  mcflag=0
  [[ $flavor == mc ]] && mcflag=1
  t=$tmp/${src}_${flavor}
  raw=$t.raw.ptx
  # shellcheck disable=SC2086 # NVCC_FLAGS: an experiment's -D flags, never for committed PTX
  nvcc -ptx -arch=$arch -DNVLS_MULTICAST=$mcflag ${NVCC_FLAGS:-} -o "$raw.nvcc" "$cu" || fail "nvcc $cu ($flavor)"
  # nvcc 13 emits `.pragma "used_bytes_mask N";` hints (an optimization
  # hint to ptxas about which bytes of a load are used), which need PTX
  # ISA 8.3 and would pin every file there. They are dropped, so that the
  # .version the file declares is set by its instructions alone.
  grep -v '^[[:space:]]*\.pragma "used_bytes_mask [0-9]*";[[:space:]]*$' "$raw.nvcc" >"$raw"
  orig=$(sed -n 's/^\.version \([0-9]*\.[0-9]*\)[[:space:]]*$/\1/p' "$raw" | head -n1)
  [[ -n "$orig" ]] || fail "$raw: no .version line"

  chosen=""
  for v in $versions; do
    version_le "$v" "$orig" || break
    sed "s/^\.version [0-9]*\.[0-9]*[[:space:]]*$/.version $v/" "$raw" >"$t.try.ptx"
    if ptxas -arch=$arch -o "$t.try.cubin" "$t.try.ptx" >/dev/null 2>&1; then
      chosen=$v
      break
    fi
  done
  if [[ -z "$chosen" ]]; then
    echo "ptxas on the unmodified nvcc output:" >&2
    ptxas -arch=$arch -o "$t.try.cubin" "$raw" >&2 || true
    fail "$cu ($flavor): ptxas accepts no .version up to $orig"
  fi

  dst=$out/${src}_${flavor}.ptx
  {
    echo "// nvls-ptx source=$cu source_sha256=$src_sha header=$header header_sha256=$header_sha flavor=$flavor ptx_version=$chosen nvcc=$nvcc_version"
    sed "s/^\.version [0-9]*\.[0-9]*[[:space:]]*$/.version $chosen/" "$raw"
  } >"$dst"

  # The final file, as committed, must assemble.
  cubin=$t.cubin
  log=$t.ptxas.log
  ptxas -arch=$arch -v -o "$cubin" "$dst" >"$log" 2>&1 || { cat "$log" >&2; fail "ptxas rejected $dst"; }
  regs=$(sed -n 's/.*Used \([0-9]*\) registers.*/\1/p' "$log" | sort -n | tail -n1)
  spills=$(grep -Eo '[0-9]+ bytes spill stores' "$log" | awk '$1 > 0' | wc -l)
  stack=$(grep -Eo '[0-9]+ bytes stack frame' "$log" | awk '$1 > 0' | wc -l)
  entries=$(grep -c '^\.visible \.entry' "$dst" || true)
  local line="$(basename "$dst"): .version $chosen (nvcc wrote $orig), $entries entries, max $regs registers, $spills spilling / $stack with stack frames"

  if [[ $flavor == mc ]]; then
    grep -q 'multimem\.st\.relaxed\.sys\.global\.u64' "$dst" || fail "$dst lacks multimem.st.u64 (start-barrier arrival)"
    if [[ $src != barrier ]]; then
      grep -Eq 'multimem\.red\.release\.sys\.global\.add\.u32' "$dst" || fail "$dst lacks multimem.red (end-barrier arrival)"
    fi
    grep -q 'fence\.proxy\.alias' "$dst" || fail "$dst lacks fence.proxy.alias"
    case $src in
      allreduce|broadcast|allgather)
        grep -q 'multimem\.st\.relaxed\.sys\.global' "$dst" || fail "$dst lacks multimem.st" ;;
    esac
    if [[ $src == allreduce || $src == reducescatter || $src == reduce ]]; then
      grep -q 'multimem\.ld_reduce' "$dst" || fail "$dst lacks multimem.ld_reduce"
      grep -q 'acc::f32' "$dst" || fail "$dst lacks .acc::f32 (f16/bf16 sums)"
      cuobjdump --dump-sass "$cubin" >"$t.sass"
      ldgmc=$(grep -c 'LDGMC' "$t.sass" || true)
      (( ldgmc > 0 )) || fail "SASS of $dst holds no LDGMC (multimem loads)"
      line+=", SASS LDGMC x$ldgmc"
    fi
  else
    if grep -q 'multimem\.\|fence\.proxy\.alias' "$dst"; then fail "$dst (unicast) holds multimem or fence.proxy.alias"; fi
  fi
  echo "$line" >"$t.sum"
  # The functions that spill, with their spill stores (ptxas -v prints
  # "Function properties for NAME" and then the frame line).
  awk '/Function properties for/ {f = $NF}
       /bytes spill stores/ {for (i = 1; i <= NF; i++) if ($(i+1) == "bytes" && $(i+2) == "spill" && $(i+3) ~ /^stores/ && $i > 0) printf "    spills %s B: %s\n", $i, f}' "$log" >>"$t.sum"
}

jobs=()
for cu in kernels/*.cu; do
  for flavor in uc mc; do
    one "$cu" "$flavor" &
    jobs+=("$!:$(basename "$cu" .cu)_$flavor")
  done
done
failed=0
summary=()
for j in "${jobs[@]}"; do
  wait "${j%%:*}" || { echo "ptx.sh: ${j#*:} failed" >&2; failed=1; continue; }
  summary+=("$(cat "$tmp/${j#*:}.sum")")
done
(( failed == 0 )) || fail "see above"

echo "ptx.sh: nvcc $nvcc_version, $arch, nvls.h sha256 $header_sha"
for s in "${summary[@]}"; do echo "  $s"; done
echo "ptx.sh: all PTX written to $out and accepted by ptxas"
