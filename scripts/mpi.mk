# MPI targets (team/mpi). The top-level Makefile includes this file:
#
#	include scripts/mpi.mk
#
# test-mpi: installs OpenMPI from Debian's packages where missing, builds
# the team/mpi test binary (cgo, -tags mpi) and runs it plainly and under
# mpirun --allow-run-as-root --oversubscribe -np $(MPI_NP), with timeouts.
# bench-mpi: nvls-bench with the MPI launcher (cgo, -tags mpi), for
# `mpirun -np N bin/nvls-bench-mpi ...`.
# mpi-devbin: the binaries the GPU machine runs, built here against
# Debian's OpenMPI and carried in .devbin/.
MPI_NP ?= 4

.PHONY: test-mpi bench-mpi mpi-devbin

test-mpi:
	@./scripts/test-mpi.sh $(MPI_NP)

bench-mpi:
	@./scripts/install-mpi.sh
	CGO_ENABLED=1 $(GO) build -tags mpi -o $(BIN)/nvls-bench-mpi ./bench

mpi-devbin:
	@./scripts/install-mpi.sh
	@mkdir -p .devbin
	CGO_ENABLED=1 $(GO) test -c -tags 'gpu mpi' -o .devbin/mpi.test ./team/mpi
	CGO_ENABLED=1 $(GO) build -tags 'gpu mpi' -o .devbin/mpi-example ./team/mpi/example
