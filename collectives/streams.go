package collectives

import (
	"errors"
	"fmt"
	"runtime"
	"sync"

	"github.com/nvls-go/nvls/cuda"
	"github.com/nvls-go/nvls/team"
)

// Streams is one CUDA stream per local rank of a team: where the typed
// collectives enqueue their work, in call order. NewStreams makes them
// (non-blocking streams, destroyed by Close); WrapStreams takes the
// caller's own. A nil *Streams is every rank's default stream (the legacy
// default stream of its context), which ranks sharing a GPU
// (team.WithSharedDevices) cannot use.
type Streams struct {
	t   *team.Team
	s   []cuda.Stream
	own bool
}

// NewStreams makes a non-blocking stream (cuda.StreamNonBlocking) on
// every local rank's device of team t. The caller closes them.
func NewStreams(t *team.Team) (*Streams, error) {
	d := t.Driver()
	s := make([]cuda.Stream, t.NumLocal())
	err := t.Run(team.JobFunc(func(l int) error {
		var err error
		s[l], err = d.StreamCreate(cuda.StreamNonBlocking)
		return err
	}))
	ss := &Streams{t: t, s: s, own: true}
	if err != nil {
		return nil, errors.Join(fmt.Errorf("collectives: NewStreams: %w", err), ss.Close())
	}
	return ss, nil
}

// WrapStreams takes the caller's streams, s[l] made on local rank l's
// device (on its worker: team.Run). Close leaves them to the caller.
func WrapStreams(t *team.Team, s []cuda.Stream) (*Streams, error) {
	if len(s) != t.NumLocal() {
		return nil, fmt.Errorf("collectives: WrapStreams: %d streams for %d local ranks (one per local rank): %w", len(s), t.NumLocal(), ErrInvalid)
	}
	return &Streams{t: t, s: append([]cuda.Stream(nil), s...)}, nil
}

// Stream is local rank l's stream.
func (s *Streams) Stream(l int) cuda.Stream {
	if s == nil {
		return 0
	}
	return s.s[l]
}

// list is the streams as the engine takes them (c's default streams for
// a nil s).
func (s *Streams) list(c *Comm) []cuda.Stream {
	if s == nil {
		return c.defStreams
	}
	return s.s
}

// Close destroys the streams NewStreams made (after their work is
// done), on a broken team too; wrapped streams stay the caller's.
func (s *Streams) Close() error {
	if s == nil || !s.own || s.s == nil {
		return nil
	}
	d, made := s.t.Driver(), s.s
	s.s = nil
	err := onRanks(s.t, func(l int) error {
		if made[l] == 0 {
			return nil
		}
		return d.StreamDestroy(made[l])
	})
	if err != nil {
		return fmt.Errorf("collectives: Streams.Close: %w", err)
	}
	return nil
}

// onRanks runs fn(l) for every local rank of t at once, each on a
// goroutine locked to its thread with the rank's context current: not
// through team.Run, which refuses work on a broken team, whose streams
// and graphs must be destroyed all the same (a survivor of a dead rank
// closes everything). After the team's Close it does nothing: releasing
// the contexts destroyed what they held.
func onRanks(t *team.Team, fn func(l int) error) error {
	if t.Closed() {
		return nil
	}
	d := t.Driver()
	errs := make([]error, t.NumLocal())
	var wg sync.WaitGroup
	for l := range errs {
		wg.Go(func() {
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			if err := d.CtxSetCurrent(t.Context(l)); err != nil {
				errs[l] = fmt.Errorf("rank %d: making its context current: %w", t.Rank(l), err)
				return
			}
			errs[l] = errors.Join(fn(l), d.CtxSetCurrent(0))
		})
	}
	wg.Wait()
	return errors.Join(errs...)
}

// Graph is the work the typed collectives enqueued on a Streams during
// Capture, instantiated once per local rank: Launch replays it. The
// kernels' barrier counters and epochs live in device memory and only
// grow, so a graph stays right however often it is replayed.
type Graph struct {
	t     *team.Team
	execs []cuda.GraphExec
	// comms are the Comms whose kernels the graph holds: Launch marks
	// their ranks' streams busy, so that their Close waits for a replay
	// no Sync saw finish, as it does for an eager launch.
	comms []*Comm
}

// Capture records what enqueue enqueues on s (one stream capture per
// local rank, CaptureModeThreadLocal) into one graph per rank and
// instantiates it; nothing runs until Launch. enqueue issues collectives
// on s (and may issue other work on s's streams); Sync must not be
// called inside it. s must be NewStreams' or WrapStreams' (a default
// stream cannot be captured). The caller closes the graph.
func (s *Streams) Capture(enqueue func() error) (*Graph, error) {
	if s == nil {
		return nil, fmt.Errorf("collectives: Capture: the default streams cannot be captured (NewStreams): %w", ErrInvalid)
	}
	d := s.t.Driver()
	if err := s.t.Run(team.JobFunc(func(l int) error {
		return d.StreamBeginCapture(s.s[l], cuda.CaptureModeThreadLocal)
	})); err != nil {
		return nil, fmt.Errorf("collectives: Capture: beginning: %w", err)
	}
	marks := launchMarks(s.t)
	encErr := enqueue()
	g := &Graph{t: s.t, execs: make([]cuda.GraphExec, len(s.s)), comms: capturedComms(s.t, marks)}
	err := s.t.Run(team.JobFunc(func(l int) error {
		cg, err := d.StreamEndCapture(s.s[l])
		if err != nil || encErr != nil {
			if cg != 0 {
				err = errors.Join(err, d.GraphDestroy(cg))
			}
			return err
		}
		x, err := d.GraphInstantiate(cg)
		g.execs[l] = x
		return errors.Join(err, d.GraphDestroy(cg))
	}))
	if err = errors.Join(encErr, err); err != nil {
		return nil, fmt.Errorf("collectives: Capture: %w", errors.Join(err, g.Close()))
	}
	return g, nil
}

// Launch replays the graph on s (the streams it was captured on, or
// others of the same devices), every local rank's part at once.
// The replay's kernels count as the Comms' last launches: their Close
// waits for s's streams (as long as Sync would) before freeing the status
// words the kernels write.
func (g *Graph) Launch(s *Streams) error {
	j := graphLaunches.Get().(*graphLaunch)
	j.g, j.s = g, s
	err := g.t.Run(j)
	*j = graphLaunch{}
	graphLaunches.Put(j)
	// Marked even when a rank's launch failed: waiting for an idle stream
	// costs one query.
	for _, c := range g.comms {
		c.markLaunched(s)
	}
	return err
}

// graphLaunch is Launch's job: every local rank's replay of g on s. The
// jobs are pooled, so that a replay allocates nothing (a closure would,
// each time).
type graphLaunch struct {
	g *Graph
	s *Streams
}

func (j *graphLaunch) Run(l int) error {
	return j.g.t.Driver().GraphLaunch(j.g.execs[l], j.s.Stream(l))
}

var graphLaunches = sync.Pool{New: func() any { return new(graphLaunch) }}

// launchMarks is how many launches each live Comm of team t has made per
// local rank.
func launchMarks(t *team.Team) map[*Comm][]uint64 {
	registry.mu.RLock()
	defer registry.mu.RUnlock()
	m := map[*Comm][]uint64{}
	for _, c := range registry.comms {
		if c.t != t {
			continue
		}
		c.mu.Lock()
		n := make([]uint64, len(c.ranks))
		for l, rs := range c.ranks {
			n[l] = rs.launches
		}
		c.mu.Unlock()
		m[c] = n
	}
	return m
}

// capturedComms are the Comms of team t that launched since marks: those
// whose work a capture recorded.
func capturedComms(t *team.Team, marks map[*Comm][]uint64) []*Comm {
	var out []*Comm
	for c, now := range launchMarks(t) {
		was := marks[c]
		for l := range now {
			if was == nil || now[l] != was[l] {
				out = append(out, c)
				break
			}
		}
	}
	return out
}

// markLaunched records that c's ranks have work on s's streams that no
// Sync has seen finish (a graph replay).
func (c *Comm) markLaunched(s *Streams) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return
	}
	for l, rs := range c.ranks {
		rs.inflight, rs.lastStream = true, s.Stream(l)
	}
}

// Close destroys the graph's instances, on a broken team too (after a
// failed replay); after the team's Close there is nothing left to destroy.
func (g *Graph) Close() error {
	if g.execs == nil {
		return nil
	}
	d, execs := g.t.Driver(), g.execs
	g.execs = nil
	if err := onRanks(g.t, func(l int) error {
		if execs[l] == 0 {
			return nil
		}
		return d.GraphExecDestroy(execs[l])
	}); err != nil {
		return fmt.Errorf("collectives: Graph.Close: %w", err)
	}
	return nil
}
