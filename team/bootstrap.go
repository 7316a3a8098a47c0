package team

import (
	"context"
	"errors"
	"fmt"
)

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

// ErrBootstrapClosed: a collective was called on a closed bootstrap, or a
// rank closed its bootstrap while others waited for it.
var ErrBootstrapClosed = errors.New("team: bootstrap closed")

// ErrPeerMissing matches a *MissingRanksError: ranks did not arrive at a
// collective of the bring-up before the deadline.
var ErrPeerMissing = errors.New("team: rank(s) did not arrive")

// MissingRanksError is a collective that did not complete: the ranks in
// Missing did not arrive before the deadline (or the waiting rank's context
// was cancelled). It matches ErrPeerMissing and unwraps to the context's
// error (errors.Is(err, context.DeadlineExceeded) after a deadline).
type MissingRanksError struct {
	// Op is the collective ("AllGather", "Barrier", "AllGatherFDs") and
	// Seq its number in the bootstrap's sequence of collectives (from 0).
	Op  string
	Seq uint64
	// Rank is the rank that gave up waiting.
	Rank int
	// Missing are the ranks that had not arrived.
	Missing []int
	Err     error
}

func (e *MissingRanksError) Error() string {
	return fmt.Sprintf("team: bootstrap: %s #%d: rank %d gave up waiting; rank(s) %v did not arrive: %v", e.Op, e.Seq, e.Rank, e.Missing, e.Err)
}

// Unwrap returns ErrPeerMissing and the context's error.
func (e *MissingRanksError) Unwrap() []error { return []error{ErrPeerMissing, e.Err} }
