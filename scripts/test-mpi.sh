#!/usr/bin/env bash
# The MPI part of `make test`: installs OpenMPI where missing
# (scripts/install-mpi.sh), vets team/mpi with its build tags, builds the team/mpi test binary with cgo and
# -tags mpi, runs it once plainly (single-process tests; the multi-rank
# ones skip with a message) and once under mpirun with NP ranks (default
# 4), each with a timeout; then the rank-kill test's CPU variant
# (team/mpi/rankkill) under mpirun --enable-recovery; then nvls-bench's
# MPI launcher. Takes about 60 s on 2 cores, most of it the cgo builds.
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

# The rank-kill test, CPU variant (team/mpi/rankkill): the last rank
# SIGKILLs itself in the middle of a loop of bootstrap collectives; the
# others must fail within the deadline naming it. --enable-recovery keeps
# mpirun from killing the survivors at once; its exit status then says
# nothing of theirs, so every survivor prints "rankkill: rank R: PASS" (or
# FAIL) and the lines are counted here.
rk=$tmp/rankkill.test
echo "test-mpi: building $rk (cgo, -tags mpi)"
CGO_ENABLED=1 timeout 300 "$go" test -c -tags mpi -o "$rk" ./team/mpi/rankkill
echo "test-mpi: rank-kill plain run (single-process tests)"
timeout 60 "$rk" -test.count=1 -test.timeout=50s
echo "test-mpi: rank-kill: mpirun --enable-recovery -np $np, rank $((np - 1)) dies"
set +e
out=$(timeout 90 mpirun --allow-run-as-root --oversubscribe --enable-recovery -np "$np" "$rk" \
  -test.count=1 -test.run '^TestBootstrapRankKill$' -test.timeout=80s 2>&1)
rc=$?
set -e
pass=$(grep -c '^rankkill: rank [0-9]*: PASS$' <<<"$out" || true)
fails=$(grep -c '^rankkill: rank [0-9]*: FAIL$' <<<"$out" || true)
if [ "$rc" != 0 ] || [ "$pass" != $((np - 1)) ] || [ "$fails" != 0 ]; then
  echo "$out"
  echo "test-mpi: rank-kill test failed: mpirun status $rc, $pass survivor(s) passed (want $((np - 1))), $fails failed" >&2
  exit 1
fi
grep '^rankkill: rank [0-9]*: [0-9]* iterations' <<<"$out" | sort

# nvls-bench's MPI launcher: built with cgo and -tags mpi; under mpirun -h
# prints the usage once (rank 0), and -sim is refused by every rank,
# saying why, at once (no rank waits for a deadline). The sweep itself
# needs GPUs (the lead runs it; the per-rank logic is tested on the
# simulated node by bench's own tests).
bm=$tmp/nvls-bench-mpi
echo "test-mpi: go vet -tags mpi ./bench; building $bm"
CGO_ENABLED=1 "$go" vet -tags mpi ./bench
CGO_ENABLED=1 timeout 300 "$go" build -tags mpi -o "$bm" ./bench
out=$(timeout 60 mpirun --allow-run-as-root --oversubscribe -np 2 "$bm" -h 2>&1)
if [ "$(grep -c '^Usage: nvls-bench' <<<"$out")" != 1 ]; then
  echo "$out"
  echo "test-mpi: nvls-bench-mpi -h under mpirun: want the usage once" >&2
  exit 1
fi
set +e
out=$(timeout 60 mpirun --allow-run-as-root --oversubscribe -np 2 "$bm" -sim -b 8 -e 64 2>&1)
rc=$?
set -e
if [ "$rc" = 0 ] || [ "$rc" = 124 ] ||
  ! grep -q '^nvls-bench: rank 0: -sim: under mpirun every rank is a process' <<<"$out" ||
  ! grep -q '^\[rank 1\] nvls-bench: rank 1: -sim: under mpirun' <<<"$out"; then
  echo "$out"
  echo "test-mpi: nvls-bench-mpi -sim under mpirun: want every rank to refuse at once (status $rc)" >&2
  exit 1
fi
echo "test-mpi: nvls-bench-mpi under mpirun: usage once, -sim refused by every rank"
echo "test-mpi: passed ($np ranks)"
