# nvls — see README.md. `make test` is what CI runs (.ci/run).
GO        ?= go
PKGS      := ./...
BIN       := bin
FUZZTIME  ?= 10000x

.PHONY: all build shim test-shim test test-unit test-fuzz test-mpi vet cross fmt-check lint ptx bench grow bench-mpi clean devbin devbin-bench

all: build

build:
	CGO_ENABLED=0 $(GO) build $(PKGS)
	CGO_ENABLED=0 $(GO) build -o $(BIN)/nvls-bench ./bench
	CGO_ENABLED=0 $(GO) build -o $(BIN)/nvls-grow ./bench/nvls-grow

# shim: libnccl-nvls.so, NCCL 2.28's C API over nvls (cgo, c-shared), with
# its header; LD_PRELOAD it or put it first on LD_LIBRARY_PATH as
# libnccl.so.2 (README, "Use from C, C++ and PyTorch").
shim:
	CGO_ENABLED=1 $(GO) build -buildmode=c-shared -o $(BIN)/libnccl-nvls.so ./shim
	cp shim/nccl.h $(BIN)/nccl.h

# test-shim: the shim's C test on the simulated node (test-unit runs it too).
test-shim:
	CGO_ENABLED=1 $(GO) test -count=1 -timeout 5m ./shim

# test-unit runs the shim's tests too (cgo on): test-shim is the shim alone.
test: fmt-check vet cross test-unit test-fuzz test-mpi
	@echo "make test: all checks passed"

test-unit:
	CGO_ENABLED=0 $(GO) build $(PKGS)
	$(GO) test -count=1 -timeout 15m $(PKGS)

# The race detector over every package, -short (TestFaultAtEveryCall faults
# the first, last and every fifth call of each entry point instead of every
# one; allocation counts are not asserted under the race detector). Not
# part of make test: 16 minutes on 2 cores (2026-11-27).
race:
	$(GO) test -race -short -count=1 -timeout 40m $(PKGS)

# Short fuzz runs of every fuzz target (seeds are committed under testdata/fuzz).
test-fuzz:
	@./scripts/fuzz.sh $(FUZZTIME)

# MPI: installs OpenMPI from Debian's packages where missing, then runs the
# multi-rank tests under mpirun.
test-mpi:
	@./scripts/test-mpi.sh

vet:
	$(GO) vet $(PKGS)
	$(GO) vet -tags gpu $(PKGS)

# The other systems the module builds on (issue 23), without cgo: build and
# vet (which compiles the tests) for each; then the simulator's tests here
# with the thread identity it has there (internal/osthread). About 20 s
# with a warm cache.
CROSS ?= darwin/amd64 darwin/arm64 windows/amd64
cross:
	@set -e; for t in $(CROSS); do \
	  echo "cross: $$t"; \
	  GOOS=$${t%/*} GOARCH=$${t#*/} CGO_ENABLED=0 $(GO) build $(PKGS); \
	  GOOS=$${t%/*} GOARCH=$${t#*/} CGO_ENABLED=0 $(GO) vet $(PKGS); \
	  GOOS=$${t%/*} GOARCH=$${t#*/} CGO_ENABLED=0 $(GO) vet -tags gpu $(PKGS); \
	done
	$(GO) test -count=1 -tags osthread_goroutine ./internal/osthread ./cuda/sim

fmt-check:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:"; echo "$$out"; exit 1; fi

lint: fmt-check vet
	@if command -v staticcheck >/dev/null 2>&1; then staticcheck $(PKGS); else echo "staticcheck not installed: go install honnef.co/go/tools/cmd/staticcheck@latest"; fi

# PTX is generated with nvcc where it exists (the GPU machine); see scripts/ptx.sh.
ptx:
	@if command -v nvcc >/dev/null 2>&1; then ./scripts/ptx.sh ptx; else echo "nvcc not found: run scripts/ptx.sh on a machine with the CUDA toolkit (the GPU machine) and commit ptx/"; exit 1; fi

# Runs the benchmark: on the local GPUs where a driver is present, otherwise on
# the simulated node (it says so; simulated times are not hardware times).
bench: build
	./$(BIN)/nvls-bench $(BENCH_ARGS)

# Runs the VMM growth experiment (bench/nvls-grow) on one GPU, or on the
# simulated node without a driver.
grow: build
	./$(BIN)/nvls-grow $(GROW_ARGS)

# devbin: every binary scripts/device-run.sh runs on a GPU machine (which has
# no Go), stripped, in one archive to carry: .devbin/bins.txz (with the nccl
# and bench gpu tests, for the one-GPU checks of docs/bench.md, and
# libnccl-nvls.so with mpi.h for the shim step). DEVBIN_KEEP="nvls-bench-mpi
# collectives.test ..." keeps only those: the whole archive, the tree and a
# second build (devbin-bench) went past the device call's 64 MiB (run 73).
DEVBIN_DIR := .devbin/bins
devbin:
	@rm -rf $(DEVBIN_DIR) && mkdir -p $(DEVBIN_DIR)
	@for p in cuda vmm team kernels collectives nccl bench; do \
	  echo "go test -c -tags gpu ./$$p"; \
	  CGO_ENABLED=0 $(GO) test -c -tags gpu -ldflags='-s -w' -o $(DEVBIN_DIR)/$$p.test ./$$p || exit 1; \
	done
	CGO_ENABLED=0 $(GO) test -c -tags gpu -ldflags='-s -w' -o $(DEVBIN_DIR)/simdiff.test ./cuda/sim/internal/simdiff
	CGO_ENABLED=0 $(GO) build -ldflags='-s -w' -o $(DEVBIN_DIR)/nvls-bench ./bench
	CGO_ENABLED=0 $(GO) build -ldflags='-s -w' -o $(DEVBIN_DIR)/nvls-grow ./bench/nvls-grow
	@./scripts/install-mpi.sh
	CGO_ENABLED=1 $(GO) test -c -tags 'gpu mpi' -ldflags='-s -w' -o $(DEVBIN_DIR)/mpi.test ./team/mpi
	CGO_ENABLED=1 $(GO) test -c -tags 'gpu mpi' -ldflags='-s -w' -o $(DEVBIN_DIR)/rankkill.test ./team/mpi/rankkill
	CGO_ENABLED=1 $(GO) build -tags mpi -ldflags='-s -w' -o $(DEVBIN_DIR)/nvls-bench-mpi ./bench
	CGO_ENABLED=1 $(GO) build -buildmode=c-shared -ldflags='-s -w' -o $(DEVBIN_DIR)/libnccl-nvls.so ./shim
	@rm -f $(DEVBIN_DIR)/libnccl-nvls.h
	@# mpi.h for nccl-tests' MPI=1 build (device-run.sh's shim step) where
	@# the GPU machine has no MPI headers: OpenMPI 4.1's C API (libmpi.so.40),
	@# without the C++ bindings (only libmpi is linked).
	@mkdir -p $(DEVBIN_DIR)/mpi-include && for h in mpi.h mpi_portable_platform.h mpi-ext.h; do \
	  cp /usr/lib/x86_64-linux-gnu/openmpi/include/$$h $(DEVBIN_DIR)/mpi-include/ || exit 1; done
	@sed -i 's/^#define OMPI_BUILD_CXX_BINDINGS 1$$/#define OMPI_BUILD_CXX_BINDINGS 0/' $(DEVBIN_DIR)/mpi-include/mpi.h
	@# DEVBIN_KEEP: only these binaries (and mpi-include) go in the archive.
	@if [ -n "$(DEVBIN_KEEP)" ]; then cd $(DEVBIN_DIR) && for f in *; do \
	  case " $(DEVBIN_KEEP) mpi-include " in *" $$f "*) ;; *) rm -rf "$$f";; esac; done; fi
	@# One xz stream with a dictionary larger than a binary: the binaries
	@# share their embedded PTX (20 MB), which is then stored once (36 -> 13 MB).
	tar cf - -C $(DEVBIN_DIR) . | xz --lzma2=preset=6,dict=256MiB -T1 >.devbin/bins.txz
	@rm -rf $(DEVBIN_DIR)
	@ls -l .devbin/bins.txz

# devbin-bench: the two benchmarks alone (nvls-bench, nvls-bench-mpi), for
# the other side of an A/B (scripts/device-run.sh's BINS, steps mpisweep,
# variants, launch, eager): .devbin/bench-$(DEVBIN_NAME).txz, about a third
# of bins.txz, so that two builds fit the device call's 64 MiB beside the
# working tree.
DEVBIN_NAME ?= $(shell git rev-parse --abbrev-ref HEAD | tr / -)
devbin-bench:
	@rm -rf $(DEVBIN_DIR) && mkdir -p $(DEVBIN_DIR)
	CGO_ENABLED=0 $(GO) build -ldflags='-s -w' -o $(DEVBIN_DIR)/nvls-bench ./bench
	@./scripts/install-mpi.sh
	CGO_ENABLED=1 $(GO) build -tags mpi -ldflags='-s -w' -o $(DEVBIN_DIR)/nvls-bench-mpi ./bench
	tar cf - -C $(DEVBIN_DIR) . | xz --lzma2=preset=6,dict=256MiB -T1 >.devbin/bench-$(DEVBIN_NAME).txz
	@rm -rf $(DEVBIN_DIR)
	@ls -l .devbin/bench-$(DEVBIN_NAME).txz

clean:
	rm -rf $(BIN) .devbin
include scripts/mpi.mk
