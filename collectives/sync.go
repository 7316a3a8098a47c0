package collectives

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"time"
	"unsafe"

	"github.com/nvls-go/nvls/cuda"
	"github.com/nvls-go/nvls/kernels"
)

// statusGrace is how much longer than the streams' deadline Sync waits
// for the status words to be read (on the Comm's own non-blocking
// streams, which nothing else occupies).
const statusGrace = time.Second

// Sync waits until every local rank's stream has finished its work, or the
// deadline passes, polling (cuStreamQuery) rather than blocking in the
// driver; then it reads every local rank's status word. The deadline is
// ctx's, or, when ctx has none, the kernels' timeout plus a grace of up to
// a second. Not capturable (it synchronizes). The streams are checked as
// those of the collectives are: one per local rank, each of its rank's
// device.
//
// A non-zero status word (a kernel whose barrier wait ran out of time:
// *TimeoutError, naming the operation, the rank, the phase and the block),
// or a stream that failed (a kernel fault), marks the team broken: Sync
// returns the team's error (matching team.ErrBroken and the cause), and so
// does every later call until Close. A deadline that passes while streams
// are still busy and no kernel reported a timeout is a *DeadlineError
// (wrapping ctx's error); the team stays usable.
func (c *Comm) Sync(ctx context.Context, streams []cuda.Stream) error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return ErrClosed
	}
	if err := c.t.Err(); err != nil {
		return err
	}
	// The streams as for a collective: polling another device's stream
	// would report this rank done while its work still runs.
	if err := c.checkStreams("Sync", streams); err != nil {
		return err
	}
	start := time.Now()
	deadline, ok := ctx.Deadline()
	if !ok {
		deadline = start.Add(c.cfg.timeout + min(c.cfg.timeout, statusGrace))
	}
	for l, rs := range c.ranks {
		rs.stream = streams[l]
		rs.qErr, rs.statusErr, rs.busy, rs.status = nil, nil, false, 0
	}
	c.sync.ctx, c.sync.deadline = ctx, deadline
	err := c.t.Run(&c.sync)
	c.sync.ctx = nil
	if err != nil {
		return err
	}
	var fatal []error
	var busy, quiet []int
	timedOut := 0
	for _, rs := range c.ranks {
		if rs.qErr != nil {
			fatal = append(fatal, fmt.Errorf("collectives: rank %d (device %d): stream %#x: %w", rs.rank, rs.dev, uint64(rs.stream), rs.qErr))
		}
		switch {
		case rs.statusErr != nil && rs.qErr == nil:
			fatal = append(fatal, fmt.Errorf("collectives: rank %d (device %d): reading the status word: %w", rs.rank, rs.dev, rs.statusErr))
		case rs.status != 0:
			fatal = append(fatal, timeoutError(rs.rank, rs.dev, rs.status))
			timedOut++
		default:
			quiet = append(quiet, rs.rank)
		}
		if rs.busy {
			busy = append(busy, rs.rank)
		}
	}
	if len(fatal) > 0 {
		if timedOut > 0 && len(quiet) > 0 {
			fatal = append(fatal, fmt.Errorf("collectives: ranks %s reported no timeout: the others waited for them (never launched the collective, or launched another one)", joinInts(quiet)))
		}
		c.t.Fail(errors.Join(fatal...))
		return c.t.Err()
	}
	if len(busy) > 0 {
		cerr := ctx.Err()
		if cerr == nil {
			cerr = context.DeadlineExceeded
		}
		return &DeadlineError{Ranks: busy, Waited: time.Since(start), Err: cerr}
	}
	return nil
}

type syncJob struct {
	c        *Comm
	ctx      context.Context
	deadline time.Time
}

func (j *syncJob) Run(l int) error {
	j.c.syncRank(j.c.ranks[l], j.ctx, j.deadline)
	return nil
}

// syncRank polls the rank's stream until it is idle, fails, or the
// deadline passes or ctx ends; then reads the status word on the status
// stream.
func (c *Comm) syncRank(rs *rankState, ctx context.Context, deadline time.Time) {
	for spin := 0; ; spin++ {
		err := c.d.StreamQuery(rs.stream)
		if err == nil {
			break
		}
		if !errors.Is(err, cuda.ErrNotReady) {
			rs.qErr = err
			break
		}
		if ctx.Err() != nil || !time.Now().Before(deadline) {
			rs.busy = true
			break
		}
		backoff(spin)
	}
	if err := c.d.MemcpyDtoHAsync(unsafe.Pointer(&rs.status), cuda.DevicePtr(rs.own+kernels.StatusOffset), 8, rs.statusStream); err != nil {
		rs.statusErr = err
		return
	}
	limit := time.Now().Add(statusGrace)
	for spin := 0; ; spin++ {
		err := c.d.StreamQuery(rs.statusStream)
		if err == nil {
			return
		}
		if !errors.Is(err, cuda.ErrNotReady) {
			rs.statusErr = err
			return
		}
		if !time.Now().Before(limit) {
			rs.statusErr = fmt.Errorf("the copy of the status word did not finish within %v", statusGrace)
			return
		}
		backoff(spin)
	}
}

// backoff: yield for a while, then sleep in growing steps up to 1 ms.
func backoff(spin int) {
	switch {
	case spin < 64:
		runtime.Gosched()
	case spin < 256:
		time.Sleep(10 * time.Microsecond)
	case spin < 1024:
		time.Sleep(100 * time.Microsecond)
	default:
		time.Sleep(time.Millisecond)
	}
}
