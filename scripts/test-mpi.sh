#!/usr/bin/env bash
# The MPI part of `make test`: installs OpenMPI where missing
# (scripts/install-mpi.sh), vets team/mpi with its build tags, builds the team/mpi test binary with cgo and
# -tags mpi, runs it once plainly (single-process tests; the multi-rank
# ones skip with a message) and once under mpirun with NP ranks (default
# 4), each with a timeout. Takes about 30 s on 2 cores, most of it the
# cgo build.
#
# Usage: scripts/test-mpi.sh [np]
set -euo pipefail
cd "$(dirname "$0")/.."
np=${1:-${MPI_NP:-4}}
go=${GO:-go}

./scripts/install-mpi.sh

echo "test-mpi: go vet -tags mpi, -tags 'gpu mpi'"
CGO_ENABLED=1 "$go" vet -tags mpi ./team/mpi/...
CGO_ENABLED=1 "$go" vet -tags 'gpu mpi' ./team/mpi/...

tmp=$(mktemp -d "${TMPDIR:-/tmp}/nvls-test-mpi.XXXXXX")
trap 'rm -rf "$tmp"' EXIT
bin=$tmp/mpi.test
echo "test-mpi: building $bin (cgo, -tags mpi)"
CGO_ENABLED=1 timeout 300 "$go" test -c -tags mpi -o "$bin" ./team/mpi

echo "test-mpi: plain run (multi-rank tests skip)"
timeout 60 "$bin" -test.count=1 -test.timeout=50s

# In containers without CAP_SYS_PTRACE, OpenMPI's shared-memory transport
# cannot use cross-memory attach: turn it off (costs nothing here).
export OMPI_MCA_btl_vader_single_copy_mechanism=none
echo "test-mpi: mpirun -np $np"
timeout 120 mpirun --allow-run-as-root --oversubscribe -np "$np" "$bin" -test.count=1 -test.timeout=100s
echo "test-mpi: passed ($np ranks)"
