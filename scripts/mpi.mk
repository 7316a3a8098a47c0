# MPI targets (team/mpi), for the top-level Makefile to include:
#
#	include scripts/mpi.mk
#
# (test-mpi stays in the Makefile as it is: it runs scripts/test-mpi.sh,
# which installs OpenMPI where missing, builds the team/mpi test binary
# with cgo and -tags mpi, and runs it plainly and under
# mpirun --allow-run-as-root --oversubscribe -np 4, with timeouts.)
#
# bench-mpi: nvls-bench with the MPI launcher (cgo, -tags mpi), for
#   mpirun -np N bin/nvls-bench-mpi ...
# mpi-devbin: the binaries the GPU machine runs, built here against
#   Debian's OpenMPI, to carry in .devbin/.

.PHONY: bench-mpi mpi-devbin

bench-mpi:
	@./scripts/install-mpi.sh
	CGO_ENABLED=1 $(GO) build -tags mpi -o $(BIN)/nvls-bench-mpi ./bench

mpi-devbin:
	@./scripts/install-mpi.sh
	@mkdir -p .devbin
	CGO_ENABLED=1 $(GO) test -c -tags 'gpu mpi' -o .devbin/mpi.test ./team/mpi
	CGO_ENABLED=1 $(GO) build -tags mpi -o .devbin/mpi-example ./team/mpi/example
