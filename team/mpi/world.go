//go:build mpi

package mpi

import (
	"errors"
	"fmt"
	"os"
	"strconv"
	"sync"
	"time"

	gompi "github.com/sbromberger/gompi"
)

// Errors of this package; match with errors.Is.
var (
	// ErrFinalized: MPI was finalized in this process; it cannot start
	// again.
	ErrFinalized = errors.New("mpi: MPI already finalized in this process")
	// ErrBroken: an earlier collective of this Bootstrap failed; the
	// error also wraps that first failure.
	ErrBroken = errors.New("mpi: bootstrap broken by an earlier failure")
	// ErrOverrun: an MPI receive wrote past its buffer (caught by the
	// guard bytes around every receive buffer).
	ErrOverrun = errors.New("mpi: receive overran its buffer")
	// ErrTooLarge: a message does not fit MPI's int count.
	ErrTooLarge = errors.New("mpi: message too large")
)

// The process's MPI state.
var proc struct {
	mu        sync.Mutex
	started   bool // this package called MPI_Init_thread
	finalized bool
	open      int    // Bootstraps not yet closed
	news      uint64 // New calls so far (numbers New's first exchange)
}

// UnderLauncher reports whether this process was started by an MPI
// launcher (mpirun, mpiexec, srun with PMI/PMIx): OpenMPI's, MPICH's or
// PMI's rank variables are set. Without one, Init makes a singleton world
// of one rank.
func UnderLauncher() bool {
	for _, v := range []string{"OMPI_COMM_WORLD_SIZE", "PMIX_RANK", "PMI_RANK", "PMI_SIZE"} {
		if _, ok := os.LookupEnv(v); ok {
			return true
		}
	}
	return false
}

// Init initializes MPI with MPI_THREAD_MULTIPLE, once per process (later
// calls do nothing). It is not bounded by a deadline. gompi ends the
// process (log.Fatalf) when the MPI library cannot give
// MPI_THREAD_MULTIPLE; Debian's OpenMPI can.
func Init() error {
	proc.mu.Lock()
	defer proc.mu.Unlock()
	return initLocked()
}

func initLocked() error {
	if proc.finalized {
		return ErrFinalized
	}
	if proc.started || gompi.IsOn() {
		return nil
	}
	gompi.Start(true)
	proc.started = true
	return nil
}

// Finalize calls MPI_Finalize, once, if this package initialized MPI;
// it is for programs that passed KeepMPI to New. It fails while a
// Bootstrap is open. It waits at most timeout (0: DefaultTimeout) for
// the other ranks (OpenMPI's MPI_Finalize synchronizes them).
func Finalize(timeout time.Duration) error {
	proc.mu.Lock()
	defer proc.mu.Unlock()
	if proc.open > 0 {
		return fmt.Errorf("mpi: Finalize with %d bootstrap(s) open", proc.open)
	}
	return finalizeLocked(timeout)
}

func finalizeLocked(timeout time.Duration) error {
	if !proc.started || proc.finalized {
		return nil
	}
	proc.finalized = true
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	done := make(chan struct{})
	go func() {
		gompi.Stop()
		close(done)
	}()
	select {
	case <-done:
		return nil
	case <-time.After(timeout):
		return fmt.Errorf("mpi: MPI_Finalize did not return within %v (another rank did not finalize)", timeout)
	}
}

// LocalRankFromEnv is the local rank the launcher set:
// OMPI_COMM_WORLD_LOCAL_RANK (OpenMPI), MPI_LOCALRANKID (MPICH) or
// SLURM_LOCALID (srun), with the variable's name; ok is false when none
// is set (or none parses).
func LocalRankFromEnv() (rank int, from string, ok bool) {
	for _, v := range []string{"OMPI_COMM_WORLD_LOCAL_RANK", "MPI_LOCALRANKID", "SLURM_LOCALID"} {
		if s, set := os.LookupEnv(v); set {
			if r, err := strconv.Atoi(s); err == nil && r >= 0 {
				return r, v, true
			}
		}
	}
	return 0, "", false
}
