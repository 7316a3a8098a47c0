package team

import (
	"context"
	"fmt"
	"sync"
)

// AllGather gathers b from every rank of the team, after the bring-up,
// through the bootstrap the team was brought up with: the result holds
// every rank's b, indexed by team rank (this process's own included).
// Every local rank contributes b: one process speaks for all the ranks it
// drives (with New, every entry is b). Like every collective of the
// bootstrap it is collective: every process of the team calls it, in
// the same order relative to the other collectives of that bootstrap
// (the caller's own, with NewRank, included); package collectives uses it
// in collectives.New to agree on its configuration.
//
// It is bounded by ctx and by the team's setup timeout (WithSetupTimeout,
// NVLS_SETUP_TIMEOUT, and with New DefaultSetupTimeout; a NewRank team
// given neither leaves the deadline to ctx and its bootstrap, as its
// bring-up did). A rank that does not arrive in time is named: the error
// is then a *MissingRanksError (ErrPeerMissing, context.DeadlineExceeded).
// Bootstraps do not recover from a failed collective (the in-process one
// and team/mpi's stay broken): every later AllGather of the team fails
// with the same error. A completed AllGather leaves the bootstrap as it
// was, whatever the ranks sent.
//
// AllGather calls are serialized. It returns ErrClosed after Close, and
// the team's error once it is broken (Fail).
func (t *Team) AllGather(ctx context.Context, b []byte) ([][]byte, error) {
	t.bootMu.Lock()
	defer t.bootMu.Unlock()
	if t.closed {
		return nil, ErrClosed
	}
	if err := t.Err(); err != nil {
		return nil, err
	}
	if t.setupTimeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, t.setupTimeout)
		defer cancel()
	}
	outs := make([][][]byte, len(t.ranks))
	errs := make([]error, len(t.ranks))
	gather := func(i int) {
		r := t.ranks[i]
		outs[i], errs[i] = r.boot.AllGather(ctx, b)
		if errs[i] != nil {
			errs[i] = fmt.Errorf("team: rank %d: AllGather: %w", r.rank, errs[i])
		} else if len(outs[i]) != t.agreed.size {
			errs[i] = fmt.Errorf("team: rank %d: AllGather: %d entries from the bootstrap, want %d", r.rank, len(outs[i]), t.agreed.size)
		}
	}
	if len(t.ranks) == 1 {
		gather(0)
	} else {
		// The local ranks' bootstraps meet each other: each needs a
		// goroutine of its own.
		var wg sync.WaitGroup
		for i := range t.ranks {
			wg.Go(func() { gather(i) })
		}
		wg.Wait()
	}
	for _, err := range errs {
		if err != nil {
			return nil, err
		}
	}
	return outs[0], nil
}
