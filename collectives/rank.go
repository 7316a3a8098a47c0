package collectives

import (
	"context"
	"fmt"
	"strings"
	"sync"

	"github.com/nvls-go/nvls/cuda"
)

// Handle is what issues a typed collective (AllReduce, ...): a *Comm
// issues every local rank's part at once, a group call for one goroutine
// that drives several GPUs; a *Rank issues one local rank's part, from
// that rank's own goroutine, and the call runs once every local rank's
// part has come. Under mpirun a process has one local rank, so its Comm
// and its one Rank read the same; in one process driving N GPUs there are
// N Ranks.
type Handle interface {
	// parts is the Comm and the local rank (-1: every one).
	parts() (*Comm, int)
}

func (c *Comm) parts() (*Comm, int) { return c, -1 }

// Rank is one local rank's handle of a Comm (Comm.Ranks).
type Rank struct {
	c *Comm
	l int
}

func (r *Rank) parts() (*Comm, int) { return r.c, r.l }

// Ranks are the Comm's per-rank handles, one per local rank in local rank
// order (one under mpirun).
func (c *Comm) Ranks() []*Rank {
	rs := make([]*Rank, c.nlocal)
	for l := range rs {
		rs[l] = &Rank{c: c, l: l}
	}
	return rs
}

// Rank is the team rank of the handle.
func (r *Rank) Rank() int { return r.c.t.Rank(r.l) }

// Local is the handle's local rank (its index in Buffer.Ptr and
// Streams.Stream).
func (r *Rank) Local() int { return r.l }

// callKey is what every local rank's part of one call must agree on.
type callKey struct {
	op    string
	dt    DType
	count int
	redop Op
	root  int
}

func (k callKey) String() string {
	return fmt.Sprintf("%s of %d %v, op %v, root %d", k.op, k.count, k.dt, k.redop, k.root)
}

// differs names the fields in which k and o differ.
func (k callKey) differs(o callKey) string {
	var d []string
	add := func(name string, a, b any) {
		if a != b {
			d = append(d, fmt.Sprintf("%s (%v, not %v)", name, a, b))
		}
	}
	add("collective", k.op, o.op)
	add("count", k.count, o.count)
	add("dtype", k.dt, o.dt)
	add("op", k.redop, o.redop)
	add("root", k.root, o.root)
	return strings.Join(d, ", ")
}

// round is one call whose local ranks' parts are coming in.
type round struct {
	key        callKey
	send, recv []cuda.DevicePtr
	streams    []cuda.Stream
	here       []bool
	n          int
	failed     bool // a part differed: every part of the round fails
	done       chan struct{}
	err        error
}

// meeting gathers the parts of the call the Ranks are making.
type meeting struct {
	mu  sync.Mutex
	cur *round
}

// meet adds local rank l's part of the call k (its send, recv and stream)
// to the round; the last part to come issues the call with every part
// and every part returns its error. A part that differs from the round's
// (another call, count, type, operator or root) fails the round: every
// part of it, those before and those after until every local rank's has
// come, returns that error and nothing is issued. ctx ends the wait of a part whose round has not been issued (the
// part is withdrawn).
func (c *Comm) meet(ctx context.Context, l int, k callKey, send, recv cuda.DevicePtr, s cuda.Stream,
	issue func(send, recv []cuda.DevicePtr, streams []cuda.Stream) error) error {
	m := &c.meet0
	m.mu.Lock()
	r := m.cur
	if r == nil {
		r = &round{key: k, send: make([]cuda.DevicePtr, c.nlocal), recv: make([]cuda.DevicePtr, c.nlocal),
			streams: make([]cuda.Stream, c.nlocal), here: make([]bool, c.nlocal), done: make(chan struct{})}
		m.cur = r
	}
	if r.here[l] {
		m.mu.Unlock()
		return argErr(k.op, "Rank", c.t.Rank(l), "local rank %d issued a second part before every local rank issued its first", l)
	}
	r.send[l], r.recv[l], r.streams[l], r.here[l] = send, recv, s, true
	r.n++
	last := r.n == c.nlocal
	if last {
		m.cur = nil
	}
	switch {
	case r.failed:
		// The round failed at an earlier part: this one fails too, and
		// the round ends with its last part, so that the next call of
		// every rank starts a new one.
		m.mu.Unlock()
		return r.err
	case r.key != k:
		r.failed = true
		r.err = &ArgError{Op: k.op, Arg: "Rank", Rank: c.t.Rank(l), Msg: fmt.Sprintf(
			"its part (%v) differs from the part other local ranks issued (%v) in %s: every local rank makes the same calls in the same order",
			k, r.key, k.differs(r.key)), Err: ErrArgMismatch}
		m.mu.Unlock()
		close(r.done)
		return r.err
	case last:
		m.mu.Unlock()
		r.err = issue(r.send, r.recv, r.streams)
		close(r.done)
		return r.err
	}
	m.mu.Unlock()
	select {
	case <-r.done:
		return r.err
	case <-ctx.Done():
		m.mu.Lock()
		if m.cur == r && !r.failed {
			r.here[l] = false
			r.n--
			m.mu.Unlock()
			return fmt.Errorf("collectives: %s: rank %d: waiting for the other local ranks' parts: %w", k.op, c.t.Rank(l), ctx.Err())
		}
		m.mu.Unlock()
		<-r.done // issued, or failed, already
		return r.err
	}
}
