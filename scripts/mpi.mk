# MPI targets (team/mpi, nvls-bench under mpirun), included by the
# top-level Makefile:
#
#	include scripts/mpi.mk
#
# (test-mpi stays in the Makefile as it is: it runs scripts/test-mpi.sh,
# which installs OpenMPI where missing, builds the team/mpi and
# team/mpi/rankkill test binaries and nvls-bench-mpi with cgo and
# -tags mpi, and runs them plainly and under mpirun with timeouts.)
#
# bench-mpi: nvls-bench with the MPI launcher (cgo, -tags mpi), for
#   mpirun --allow-run-as-root -np N bin/nvls-bench-mpi -transport unicast ...
# mpi-devbin: every binary the GPU machine runs under mpirun, built here
#   against Debian's OpenMPI, to carry in .devbin/ (the GPU machine has
#   OpenMPI installed): the team/mpi tests (gpu+mpi), the example, the
#   benchmark and the rank-kill test (gpu+mpi); then lists the shared
#   libraries each needs, directly (NEEDED: libmpi.so.40 and libc.so.6
#   with Debian bookworm's OpenMPI 4.1) and all of them (ldd), which the
#   GPU machine must provide (libcuda.so.1 and libnccl.so.2 are loaded at
#   run time with dlopen, so they are not among them).

.PHONY: bench-mpi mpi-devbin

bench-mpi:
	@./scripts/install-mpi.sh
	CGO_ENABLED=1 $(GO) build -tags mpi -o $(BIN)/nvls-bench-mpi ./bench

MPI_DEVBIN := .devbin/mpi.test .devbin/mpi-example .devbin/nvls-bench-mpi .devbin/rankkill.test

mpi-devbin:
	@./scripts/install-mpi.sh
	@mkdir -p .devbin
	CGO_ENABLED=1 $(GO) test -c -tags 'gpu mpi' -o .devbin/mpi.test ./team/mpi
	CGO_ENABLED=1 $(GO) build -tags mpi -o .devbin/mpi-example ./team/mpi/example
	CGO_ENABLED=1 $(GO) build -tags mpi -o .devbin/nvls-bench-mpi ./bench
	CGO_ENABLED=1 $(GO) test -c -tags 'gpu mpi' -o .devbin/rankkill.test ./team/mpi/rankkill
	@for b in $(MPI_DEVBIN); do \
	  echo "$$b: NEEDED $$(readelf -d $$b | sed -n 's/.*(NEEDED).*\[\(.*\)\]/\1/p' | tr '\n' ' ')(newest symbol version $$(objdump -T $$b | grep -o 'GLIBC_[0-9.]*' | sort -uV | tail -n1)); ldd:"; \
	  ldd $$b | sed 's/^/  /'; \
	done
