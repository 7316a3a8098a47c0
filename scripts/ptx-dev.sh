#!/usr/bin/env bash
# Development PTX for the simulated node, made with clang's CUDA front end
# where there is no CUDA toolkit (this machine). Never commit its output:
# the committed PTX comes from nvcc on the GPU machine (scripts/ptx.sh).
#
# Usage: scripts/ptx-dev.sh [OUTDIR]     (default /tmp/nvls-devptx)
# then:  NVLS_PTX_DIR=OUTDIR go test ./collectives/...
#
# The simulator only reads a PTX file's entry points and parameter sizes
# and runs its Go reference kernels under those names, so PTX from clang
# serves it while kernels/*.cu change; the tests that compare the sources'
# sha256 with the committed PTX (package ptx) keep failing until the PTX is
# regenerated with nvcc. Installs clang-19 from Debian where it is missing.
set -euo pipefail
out=${1:-/tmp/nvls-devptx}
cd "$(dirname "$0")/.."
cc=$(command -v clang-19 || command -v clang || true)
if [[ -z "$cc" ]]; then
  apt-get install -y clang-19 >/dev/null
  cc=clang-19
fi
mkdir -p "$out"
for src in kernels/*.cu; do
  name=$(basename "$src" .cu)
  for flavor in uc mc; do
    m=0
    [[ $flavor == mc ]] && m=1
    tmp=$(mktemp)
    "$cc" -x cuda --cuda-device-only -S -nocudainc -nocudalib --cuda-gpu-arch=sm_90 \
      -O3 -DNVLS_MULTICAST=$m -o "$tmp" "$src"
    {
      echo "// nvls-ptx source=$src source_sha256=$(sha256sum "$src" | cut -c1-64) header=kernels/nvls.h header_sha256=$(sha256sum kernels/nvls.h | cut -c1-64) flavor=$flavor ptx_version=dev nvcc=none-clang-dev"
      cat "$tmp"
    } >"$out/${name}_${flavor}.ptx"
    rm -f "$tmp"
  done
done
echo "development PTX (clang, not for commit) in $out: NVLS_PTX_DIR=$out"
