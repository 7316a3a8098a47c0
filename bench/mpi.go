//go:build mpi

package main

// The MPI launcher (built with -tags mpi, cgo, against OpenMPI: make
// bench-mpi): under mpirun every process is one rank and drives the GPU
// of its local rank; see perrank.go for how the ranks share the sweep.
//
//	make bench-mpi
//	mpirun --allow-run-as-root -np 4 bin/nvls-bench-mpi -transport unicast -b 8 -e 128M
//
// Started without an MPI launcher, the binary is the single-process
// nvls-bench.

import (
	"context"
	"io"
	"log/slog"
	"runtime"
	"time"

	"github.com/nvls-go/nvls/team/mpi"
)

// launch is the program: the per-rank mode under mpirun, the
// single-process one otherwise.
func launch(args []string, stdout, stderr io.Writer) int {
	if !mpi.UnderLauncher() {
		return run(args, stdout, stderr)
	}
	return runMPI(args, stdout, stderr)
}

// mpiSetupTimeout bounds the bootstrap's bring-up (every rank must call
// MPI_Init and reach it).
const mpiSetupTimeout = 2 * time.Minute

func runMPI(args []string, stdout, stderr io.Writer) int {
	ctx, cancel := context.WithTimeout(context.Background(), mpiSetupTimeout)
	boot, err := mpi.New(ctx, mpi.WithLogger(slog.New(slog.NewTextHandler(stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))))
	cancel()
	if err != nil {
		fprintf(stderr, "nvls-bench: MPI bootstrap: %v\n", err)
		return exitFail
	}
	// The host's cores, shared among the ranks on it (the check computes
	// its reference on all of them).
	runtime.GOMAXPROCS(max(1, runtime.NumCPU()/max(1, boot.LocalSize())))
	code := runRank(args, &perRank{boot: boot, local: boot.LocalRank()}, stdout, stderr)
	if err := boot.Close(); err != nil {
		fprintf(stderr, "nvls-bench: rank %d: closing the MPI bootstrap: %v\n", boot.Rank(), err)
		code = max(code, exitFail)
	}
	return code
}
