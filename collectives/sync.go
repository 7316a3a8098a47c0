package collectives

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"slices"
	"sync/atomic"
	"time"

	"github.com/nvls-go/nvls/cuda"
	"github.com/nvls-go/nvls/internal/kabi"
)

// syncGrace bounds how much longer than the kernels' timeout Sync waits
// by default (min(timeout, syncGrace) more): a kernel that started just
// before Sync gives up by its timeout, and what is queued behind it
// drains at once.
const syncGrace = time.Second

// Sync waits until every local rank's stream has finished its work, or the
// deadline passes; then it reads every local rank's status word. The
// deadline is ctx's, or, when ctx has none, the kernels' timeout plus a
// grace of up to a second. Not capturable (it synchronizes). The streams
// are checked as those of the collectives are: one per local rank, each of
// its rank's device.
//
// The wait polls (cuStreamQuery), spinning for the first 200 us, then
// yielding, then sleeping in growing steps up to 1 ms. Created streams are
// polled from the calling goroutine; a default stream (0, 1, 2) is polled
// on its rank's worker, where its context is current. (A driver that
// wants a current context for every query gets the calling goroutine with
// the ranks' context current where they share one, else the workers.)
// The status words live in mapped host memory that the kernels write:
// reading them is a load, not a copy.
//
// A non-zero status word (a kernel whose wait ran out of time:
// *TimeoutError, naming the operation, the rank, the phase and the block;
// or one that gave up because another rank's kernel had failed first:
// *AbortError), or a stream that failed (a kernel fault), marks the team
// broken: Sync returns the team's error (matching team.ErrBroken and the
// cause), and so does every later call until Close. A deadline that passes
// while streams are still busy and no kernel reported a failure is a
// *DeadlineError (wrapping ctx's error); the team stays usable.
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
	cl := c.getCall("Sync")
	defer c.putCall(cl)
	cl.ctx, cl.start = ctx, time.Now()
	deadline, ok := ctx.Deadline()
	if !ok {
		deadline = cl.start.Add(c.cfg.timeout + min(c.cfg.timeout, syncGrace))
	}
	cl.deadline = deadline
	direct := !c.noDirect
	for l := range cl.parts {
		cl.parts[l].stream = streams[l]
		direct = direct && streams[l] > 2
	}
	if direct && c.pollAll(cl) {
		// The driver wants a current context for cuStreamQuery after
		// all: from now on, on the workers.
		c.noDirect, direct = true, false
	}
	if !direct {
		// With a current context: on the calling goroutine where the
		// collectives launch from it (onCaller), else on the workers.
		var err error
		if c.onCaller(cl) {
			err = c.tl.RunHere((*syncJob)(cl))
		} else {
			err = c.t.Run((*syncJob)(cl))
		}
		if err != nil {
			return err
		}
	}
	return c.verdict(cl)
}

// pollAll polls every part's stream from the calling goroutine until each
// is idle or failed (qErr), or the deadline passes or the call's ctx ends
// (the busy ones get busy). It returns true, with nothing settled, when a
// query failed for want of a current context.
func (c *Comm) pollAll(cl *call) (needCtx bool) {
	left := len(cl.parts)
	p := pacer{start: cl.start}
	for {
		for l := range cl.parts {
			pt := &cl.parts[l]
			if pt.idle {
				continue
			}
			if pt.idle, pt.qErr = c.query(pt.stream); pt.idle {
				if errors.Is(pt.qErr, cuda.ErrInvalidContext) {
					pt.qErr = nil
					return true
				}
				left--
			}
		}
		if left == 0 {
			return false
		}
		if cl.ctx.Err() != nil || !time.Now().Before(cl.deadline) {
			for l := range cl.parts {
				cl.parts[l].busy = !cl.parts[l].idle
			}
			return false
		}
		p.pause()
	}
}

// query polls stream s once: done when it is idle, or failed (then err
// says how).
func (c *Comm) query(s cuda.Stream) (done bool, err error) {
	err = c.d.StreamQuery(s)
	if err == nil {
		return true, nil
	}
	if errors.Is(err, cuda.ErrNotReady) {
		return false, nil
	}
	return true, err
}

// syncJob is a Sync call as the job that polls one rank's stream with its
// context current: on its worker (Run), or on the calling goroutine
// (RunHere, the ranks in turn: the deadline is the same for all, and
// every stream must finish anyway).
type syncJob call

func (j *syncJob) Run(l int) error {
	cl := (*call)(j)
	pt := &cl.parts[l]
	p := pacer{start: cl.start}
	for {
		var done bool
		if done, pt.qErr = cl.c.query(pt.stream); done {
			return nil
		}
		if cl.ctx.Err() != nil || !time.Now().Before(cl.deadline) {
			pt.busy = true
			return nil
		}
		p.pause()
	}
}

// verdict reads the status words once the wait of Sync call cl is over
// and makes Sync's answer. The success path allocates nothing.
func (c *Comm) verdict(cl *call) error {
	var faults, timeouts, aborts []error
	var busy, quiet []int
	for l := range cl.parts {
		rs := &cl.parts[l]
		if rs.qErr != nil {
			faults = append(faults, fmt.Errorf("collectives: rank %d (device %d): stream %#x: %w", rs.rank, rs.dev, uint64(rs.stream), rs.qErr))
		}
		switch word := atomic.LoadUint64(rs.hostStatus); {
		case word == 0 && rs.qErr == nil:
			quiet = append(quiet, rs.rank)
		case word == 0:
		case (kabi.Status{Word: word}).Aborted():
			aborts = append(aborts, statusError(rs.rank, rs.dev, word, c.cfg.deadline, nil))
		default:
			timeouts = append(timeouts, statusError(rs.rank, rs.dev, word, c.cfg.deadline, rs.diag(c.size)))
		}
		switch {
		case rs.busy:
			busy = append(busy, rs.rank)
		case rs.qErr == nil && rs.stream == rs.lastStream:
			rs.inflight = false
		}
	}
	if len(faults)+len(timeouts)+len(aborts) > 0 {
		fatal := slices.Concat(faults, timeouts, aborts)
		if len(timeouts)+len(aborts) > 0 && len(quiet) > 0 {
			fatal = append(fatal, fmt.Errorf("collectives: %s reported no timeout: the others waited for %s (never launched the collective, or launched another one)", ranksText(quiet), pronoun(quiet)))
		}
		c.tl.Fail(errors.Join(fatal...))
		return c.t.Err()
	}
	if len(busy) > 0 {
		cerr := cl.ctx.Err()
		if cerr == nil {
			cerr = context.DeadlineExceeded
		}
		return &DeadlineError{Ranks: busy, Waited: time.Since(cl.start), Err: cerr}
	}
	return nil
}

// The phases of every wait on the device (Sync, Close): spinning on
// cuStreamQuery for spinFor (a small collective is done within it, and a
// yield or a sleep costs more than it does), then yielding until
// yieldFor, then sleeping in growing steps up to a millisecond.
const (
	spinFor  = 200 * time.Microsecond
	yieldFor = 2 * time.Millisecond
)

// pacer paces a polling loop that began at start.
type pacer struct {
	start time.Time
	sleep time.Duration
}

func (p *pacer) pause() {
	switch el := time.Since(p.start); {
	case el < spinFor:
	case el < yieldFor:
		runtime.Gosched()
	default:
		p.sleep = min(max(2*p.sleep, 10*time.Microsecond), time.Millisecond)
		time.Sleep(p.sleep)
	}
}
