package team

import "context"

// Bootstrap is how the ranks of a team find each other and exchange what
// the bring-up needs. One value stands for one rank. Every method is
// collective except Rank, Size and InProcess: all ranks call it, in the
// same order; each honours ctx's deadline and, when a rank does not
// arrive in time, returns an error naming the ranks that did not.
//
// Two implementations: the in-process one (all ranks are goroutines of one
// process, NewInProcess) and the MPI one (team/mpi, one process per GPU).
type Bootstrap interface {
	// Rank is this rank, in [0, Size()).
	Rank() int
	// Size is the number of ranks.
	Size() int
	// InProcess reports whether all ranks live in this process, so that
	// driver handles can be used across ranks without export/import.
	InProcess() bool
	// AllGather returns every rank's data, indexed by rank (mine
	// included). Ranks may pass different lengths.
	AllGather(ctx context.Context, mine []byte) ([][]byte, error)
	// Barrier returns once every rank has entered it.
	Barrier(ctx context.Context) error
	// AllGatherFDs passes one open file descriptor from every rank to
	// every rank (fd = -1 for none). It returns, indexed by rank, file
	// descriptors valid in this process that the caller owns and must
	// close (-1 where a rank passed none). The caller's own fd is not
	// consumed.
	AllGatherFDs(ctx context.Context, fd int) ([]int, error)
	// Close releases what the bootstrap holds.
	Close() error
}
