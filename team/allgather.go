package team

import (
	"context"
	"fmt"
	"sync"

	"github.com/nvls-go/nvls/internal/deadline"
)

// AllGather gathers b from every rank through the bootstrap the team was
// brought up with, after the bring-up: the result is indexed by team rank,
// and one process speaks for all its local ranks. It is collective: every
// process calls it, in the same order relative to the bootstrap's other
// collectives (collectives.New uses it to agree on its configuration).
// It is bounded by ctx and the setup timeout, like the bring-up's
// exchanges (a rank that does not come is named: *MissingRanksError);
// bootstraps do not recover from a failed collective. Calls are
// serialized; ErrClosed after Close, the team's error once it is broken.
func (t *Team) AllGather(ctx context.Context, b []byte) ([][]byte, error) {
	t.bootMu.Lock()
	defer t.bootMu.Unlock()
	if err := t.usable(); err != nil {
		return nil, err
	}
	if t.setupTimeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = deadline.WithTimeout(ctx, t.setupTimeout, setupDeadline, t.setupTimeoutSrc)
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
			return nil, deadline.Explain(ctx, err)
		}
	}
	return outs[0], nil
}
