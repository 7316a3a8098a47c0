#!/usr/bin/env bash
# Runs scripts/ptx.sh on the GPU machine (through the device call), where the
# toolkit may not be on PATH and the results must land under $OUT:
#   $OUT/ptx/*.ptx   the generated PTX (copy into ptx/ and commit)
#   $OUT/ptx.log     ptx.sh's summary (ptxas and SASS checks)
# Usage (from the repository root): scripts/ptx-device.sh
set -euo pipefail
cd "$(dirname "$0")/.."
: "${OUT:?OUT must name the directory whose files come back}"
for d in /usr/local/cuda/bin /usr/local/cuda-*/bin; do
  [[ -x $d/nvcc ]] && { PATH=$d:$PATH; break; }
done
export PATH
mkdir -p "$OUT/ptx"
scripts/ptx.sh "$OUT/ptx" 2>&1 | tee "$OUT/ptx.log"
