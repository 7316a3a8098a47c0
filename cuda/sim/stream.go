package sim

import (
	"sync"
	"time"

	"github.com/nvls-go/nvls/cuda"
	"github.com/nvls-go/nvls/internal/osthread"
)

// op is one unit of stream work.
type op struct {
	name string
	// work marks ops that touch memory or run kernels: they are skipped
	// once the context is broken. Bookkeeping ops (event records, waits)
	// always run so that nothing waits forever.
	work bool
	// onSubmit runs when the op is enqueued (on the submitting goroutine).
	onSubmit func()
	run      func() error
}

// stream is a CUstream: one goroutine runs its ops in order.
type stream struct {
	n      *Node
	ctx    *context
	handle cuda.Stream
	flags  uint32
	legacy bool

	mu       sync.Mutex
	cond     sync.Cond
	queue    []op
	enq      uint64 // ops enqueued
	done     uint64 // ops finished
	stopped  bool
	exited   chan struct{}
	capture  *capture // non-nil while capturing
	captured bool     // the capture began on this stream (not joined)
}

// capture is a stream capture in progress: its mode, and the OS thread
// that began it (what the mode's rules are about).
type capture struct {
	invalid error
	origin  *stream
	joined  []*stream
	mode    cuda.StreamCaptureMode
	tid     int

	// The graph so far and its edges: ops in capture order; lane numbers
	// the streams in the order they first captured an op; idx[s] holds
	// the indices in ops of s's ops (len(idx[s]) counts them); after[t][s]
	// is how many of stream s's ops stream t's next op comes after,
	// through the events t waited on (also for
	// CUDA_ERROR_STREAM_CAPTURE_UNJOINED); pend[t] is the part of it that
	// t's waits added since t's last op, which t's next op takes as edges.
	depMu sync.Mutex
	ops   []gnode
	lane  map[*stream]int
	idx   map[*stream][]int
	after map[*stream]map[*stream]int
	pend  map[*stream]map[*stream]int
}

func newCapture(origin *stream, mode cuda.StreamCaptureMode, tid int) *capture {
	return &capture{origin: origin, mode: mode, tid: tid, lane: map[*stream]int{}, idx: map[*stream][]int{},
		after: map[*stream]map[*stream]int{}, pend: map[*stream]map[*stream]int{}}
}

// add captures o on s: it comes after s's previous op and after the ops of
// other streams that s's waits since then made s follow.
func (c *capture) add(s *stream, o op) {
	c.depMu.Lock()
	defer c.depMu.Unlock()
	if _, ok := c.lane[s]; !ok {
		c.lane[s] = len(c.lane)
	}
	nd := gnode{op: o}
	for t, k := range c.pend[s] {
		if t != s && k > 0 {
			nd.after = append(nd.after, c.idx[t][k-1])
		}
	}
	delete(c.pend, s)
	c.idx[s] = append(c.idx[s], len(c.ops))
	c.ops = append(c.ops, nd)
}

// snapshot is what a record of an event on s now makes its waiters come
// after: s's ops so far and what those came after.
func (c *capture) snapshot(s *stream) map[*stream]int {
	c.depMu.Lock()
	defer c.depMu.Unlock()
	m := map[*stream]int{s: len(c.idx[s])}
	for o, n := range c.after[s] {
		m[o] = max(m[o], n)
	}
	return m
}

// follow makes t's next ops come after snapshot snap (a wait on an
// event recorded in the capture).
func (c *capture) follow(t *stream, snap map[*stream]int) {
	c.depMu.Lock()
	defer c.depMu.Unlock()
	if c.after[t] == nil {
		c.after[t] = map[*stream]int{}
	}
	if c.pend[t] == nil {
		c.pend[t] = map[*stream]int{}
	}
	for o, n := range snap {
		if n > c.after[t][o] {
			c.after[t][o] = n
			c.pend[t][o] = n
		}
	}
}

// graph returns what the capture recorded as a graph.
func (c *capture) graph() dag {
	c.depMu.Lock()
	defer c.depMu.Unlock()
	d := dag{nodes: c.ops, lanes: make([][]int, len(c.lane))}
	for s, l := range c.lane {
		d.lanes[l] = c.idx[s]
	}
	waited := make([]bool, len(c.ops))
	for _, nd := range c.ops {
		for _, a := range nd.after {
			if !waited[a] {
				waited[a] = true
				d.waited = append(d.waited, a)
			}
		}
	}
	return d
}

// unjoined returns a stream that joined the capture and has ops the
// origin's end does not come after (a fork never joined back), or nil.
func (c *capture) unjoined() *stream {
	c.depMu.Lock()
	defer c.depMu.Unlock()
	for _, j := range c.joined {
		if j != c.origin && len(c.idx[j]) > c.after[c.origin][j] {
			return j
		}
	}
	return nil
}

// prohibits says whether the capture forbids the thread tid potentially
// unsafe calls (the documentation of cuStreamBeginCapture's modes): a
// global-mode capture forbids them to every thread, a thread-local one
// to the thread that began it, a relaxed one to none. Every thread is
// taken to be in the default global mode (cuThreadExchangeStreamCaptureMode
// is not modelled).
func (c *capture) prohibits(tid int) bool {
	switch c.mode {
	case cuda.CaptureModeGlobal:
		return true
	case cuda.CaptureModeThreadLocal:
		return c.tid == tid
	}
	return false
}

func modeName(m cuda.StreamCaptureMode) string {
	switch m {
	case cuda.CaptureModeGlobal:
		return "global"
	case cuda.CaptureModeThreadLocal:
		return "thread-local"
	}
	return "relaxed"
}

func newStream(n *Node, ctx *context, h cuda.Stream, flags uint32, legacy bool) *stream {
	s := &stream{n: n, ctx: ctx, handle: h, flags: flags, legacy: legacy, exited: make(chan struct{})}
	s.cond.L = &s.mu
	go s.loop()
	return s
}

func (s *stream) loop() {
	defer close(s.exited)
	s.mu.Lock()
	for {
		for len(s.queue) == 0 && !s.stopped {
			s.cond.Wait()
		}
		if len(s.queue) == 0 {
			s.mu.Unlock()
			return
		}
		o := s.queue[0]
		s.queue[0] = op{}
		s.queue = s.queue[1:]
		s.mu.Unlock()
		s.exec(o)
		s.mu.Lock()
		s.done++
		s.cond.Broadcast()
	}
}

func (s *stream) exec(o op) { o.exec(s.ctx) }

// exec runs o as work of context ctx: a work op is skipped once ctx is
// broken, and an error breaks ctx.
func (o *op) exec(ctx *context) {
	if o.work && ctx.sticky.Load() != nil {
		return
	}
	if err := o.run(); err != nil {
		ctx.fault(err)
	}
}

func (s *stream) stop() {
	s.mu.Lock()
	s.stopped = true
	s.cond.Broadcast()
	s.mu.Unlock()
	<-s.exited
}

func (s *stream) enqueued() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.enq
}

// wait blocks until the stream finished its first target ops.
func (s *stream) wait(target uint64) {
	s.mu.Lock()
	for s.done < target {
		s.cond.Wait()
	}
	s.mu.Unlock()
}

func (s *stream) capturingInto(c *capture) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.capture == c
}

func (s *stream) capturing() bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.capture != nil
}

// deps returns the waits the legacy default stream's semantics add to an
// op submitted on s: the legacy stream waits for every blocking stream of
// its context, and a blocking stream waits for the legacy stream.
func (s *stream) deps() func() {
	if s.flags&cuda.StreamNonBlocking != 0 {
		return nil
	}
	type dep struct {
		s      *stream
		target uint64
	}
	var ds []dep
	n := s.n
	n.mu.Lock()
	if s.legacy {
		for _, o := range n.streams {
			if o.ctx == s.ctx && o.flags&cuda.StreamNonBlocking == 0 {
				if t := o.enqueued(); t > 0 {
					ds = append(ds, dep{o, t})
				}
			}
		}
	} else if l := s.ctx.legacy; l != nil {
		if t := l.enqueued(); t > 0 {
			ds = append(ds, dep{l, t})
		}
	}
	n.mu.Unlock()
	if len(ds) == 0 {
		return nil
	}
	return func() {
		for _, d := range ds {
			d.s.wait(d.target)
		}
	}
}

// submit enqueues o on s, or records it when s is capturing.
func (s *stream) submit(name string, run func() error) error {
	return s.submitOp(op{name: name, work: true, run: run})
}

func (s *stream) submitOp(o op) error {
	if err := s.implicitCapture(o.name); err != nil {
		return err
	}
	s.mu.Lock()
	if c := s.capture; c != nil {
		c.add(s, o)
		s.mu.Unlock()
		return nil
	}
	s.mu.Unlock()
	if wait := s.deps(); wait != nil {
		inner := o.run
		o.run = func() error { wait(); return inner() }
	}
	if o.onSubmit != nil {
		o.onSubmit()
	}
	s.mu.Lock()
	if s.stopped {
		s.mu.Unlock()
		return cuda.NewError(o.name, cuda.ErrorInvalidHandle, "stream was destroyed")
	}
	s.queue = append(s.queue, o)
	s.enq++
	s.cond.Broadcast()
	s.mu.Unlock()
	return nil
}

// implicitCapture fails a use of the legacy default stream s (work on it,
// a synchronization, a query) while a blocking stream of its context
// captures: the legacy stream would depend on the capture. As the CUDA
// programming guide says, the use is invalid and invalidates the capture;
// the driver's code is CUDA_ERROR_STREAM_CAPTURE_IMPLICIT (580.159.04,
// internal/simdiff). nil for any other stream, or when none captures.
func (s *stream) implicitCapture(opName string) error {
	if !s.legacy {
		return nil
	}
	n := s.n
	var hit *stream
	n.mu.Lock()
	for _, o := range n.streams {
		if o.ctx != s.ctx || o.flags&cuda.StreamNonBlocking != 0 {
			continue
		}
		o.mu.Lock()
		if c := o.capture; c != nil {
			if c.invalid == nil {
				c.invalid = errf(opName, cuda.ErrorCaptureImplicit, "the legacy stream was used while stream %#x captured", uint64(o.handle))
			}
			hit = o
		}
		o.mu.Unlock()
	}
	n.mu.Unlock()
	if hit == nil {
		return nil
	}
	return errf(opName, cuda.ErrorCaptureImplicit, "operation would make the legacy stream depend on a capturing blocking stream (%#x)", uint64(hit.handle))
}

// refuseUnsafe fails a potentially unsafe call (the simulator counts the
// queries and synchronizations of a stream, an event or the context) made
// while an active capture prohibits them to the calling thread (see
// capture.prohibits), with CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED, and
// invalidates those captures. The driver refuses the query and the
// synchronization of the legacy stream so while a non-blocking stream
// captures in thread-local mode, and allows the query in relaxed mode
// (580.159.04, internal/simdiff: 3 cases); the other calls, the global
// mode and the invalidation follow the documentation (the modes', and
// the programming guide's "an invalid operation invalidates the
// capture"). A capture already invalidated prohibits nothing more.
func (n *Node) refuseUnsafe(opName string) error {
	tid := osthread.ID()
	var hit error
	n.mu.Lock()
	for _, s := range n.streams {
		s.mu.Lock()
		if c := s.capture; c != nil && c.origin == s && c.invalid == nil && c.prohibits(tid) {
			c.invalid = errf(opName, cuda.ErrorCaptureInvalidated, "%s, a potentially unsafe call, was made while stream %#x captured in %s mode", opName, uint64(s.handle), modeName(c.mode))
			hit = errf(opName, cuda.ErrorCaptureUnsupported, "stream %#x captures in %s mode: no query or synchronization is permitted (but in the relaxed mode)", uint64(s.handle), modeName(c.mode))
		}
		s.mu.Unlock()
	}
	n.mu.Unlock()
	return hit
}

// submitWait submits run and waits for it, returning its error (the
// synchronous copies and sets).
func (s *stream) submitWait(name string, run func() error) error {
	var res error
	if err := s.submit(name, func() error { res = run(); return res }); err != nil {
		return err
	}
	s.wait(s.enqueued())
	return res
}

// streamFor resolves a stream handle; 0 (and CU_STREAM_LEGACY, 1, and
// CU_STREAM_PER_THREAD, 2, which the simulator treats alike) is the
// current context's legacy default stream.
func (n *Node) streamFor(opName string, h cuda.Stream) (*stream, error) {
	if h <= 2 {
		ctx, err := n.cur(opName)
		if err != nil {
			return nil, err
		}
		n.mu.Lock()
		defer n.mu.Unlock()
		if ctx.legacy == nil {
			ctx.legacy = newStream(n, ctx, 0, cuda.StreamDefault, true)
		}
		return ctx.legacy, nil
	}
	n.mu.Lock()
	s := n.streams[h]
	n.mu.Unlock()
	if s == nil {
		return nil, errf(opName, cuda.ErrorInvalidHandle, "stream %#x does not exist (destroyed, or never created)", uint64(h))
	}
	return s, nil
}

// StreamCreate is cuStreamCreate on the current context.
func (n *Node) StreamCreate(flags uint32) (cuda.Stream, error) {
	return get(n.ctxCall("cuStreamCreate", uint64(flags), 0, 0), func(c *call) (cuda.Stream, error) {
		ctx := c.ctx
		if flags&^cuda.StreamNonBlocking != 0 {
			return 0, c.errf(cuda.ErrorInvalidValue, "flags %#x", flags)
		}
		n.mu.Lock()
		defer n.mu.Unlock()
		h := cuda.Stream(n.newID())
		n.streams[h] = newStream(n, ctx, h, flags, false)
		return h, nil
	})
}

// StreamDestroy is cuStreamDestroy: work already enqueued still runs.
func (n *Node) StreamDestroy(h cuda.Stream) error {
	return n.call("cuStreamDestroy", -1, uint64(h), 0, 0).do(func(c *call) error {
		n.mu.Lock()
		s := n.streams[h]
		if s == nil {
			n.mu.Unlock()
			return c.errf(cuda.ErrorInvalidHandle, "stream %#x does not exist", uint64(h))
		}
		delete(n.streams, h)
		n.mu.Unlock()
		c.device(s.ctx.dev)
		s.mu.Lock()
		if capt := s.capture; capt != nil {
			capt.invalid = c.errf(cuda.ErrorCaptureInvalidated, "a stream of the capture was destroyed")
			s.capture = nil
		}
		s.mu.Unlock()
		go s.stop()
		return nil
	})
}

// invalidateCapture ends s's capture as failed (a synchronizing call was
// made on a capturing stream) and returns the error of that call.
func (s *stream) invalidateCapture(opName string) error {
	s.mu.Lock()
	c := s.capture
	s.mu.Unlock()
	if c == nil {
		return nil
	}
	c.invalid = errf(opName, cuda.ErrorCaptureInvalidated, "%s was called on a capturing stream", opName)
	return errf(opName, cuda.ErrorCaptureUnsupported, "stream %#x is capturing: %s is not allowed during capture", uint64(s.handle), opName)
}

// StreamSynchronize is cuStreamSynchronize.
func (n *Node) StreamSynchronize(h cuda.Stream) error {
	return n.streamCall("cuStreamSynchronize", h, 0).do(func(c *call) error {
		s := c.s
		if err := s.invalidateCapture(c.op); err != nil {
			return err
		}
		if err := s.implicitCapture(c.op); err != nil {
			return err
		}
		if err := n.refuseUnsafe(c.op); err != nil {
			return err
		}
		if w := s.deps(); w != nil && s.legacy {
			w()
		}
		s.wait(s.enqueued())
		return s.ctx.stickyErr(c.op)
	})
}

// ready is a query's answer: ctx's sticky error, else CUDA_ERROR_NOT_READY
// while work is pending, else nil.
func (c *call) ready(ctx *context, pending bool) error {
	if err := ctx.stickyErr(c.op); err != nil {
		return err
	}
	if pending {
		return c.errf(cuda.ErrorNotReady, "")
	}
	return nil
}

// StreamGetCtx is cuStreamGetCtx: the context the stream was created in
// (the legacy default stream 0: the calling thread's current context).
func (n *Node) StreamGetCtx(h cuda.Stream) (cuda.Context, error) {
	return get(n.streamCall("cuStreamGetCtx", h, 0), func(c *call) (cuda.Context, error) {
		s := c.s
		return s.ctx.handle, nil
	})
}

// StreamQuery is cuStreamQuery: nil when done, CUDA_ERROR_NOT_READY while
// work is pending.
func (n *Node) StreamQuery(h cuda.Stream) error {
	return n.streamCall("cuStreamQuery", h, 0).do(func(c *call) error {
		s := c.s
		if err := s.invalidateCapture(c.op); err != nil {
			return err
		}
		if err := s.implicitCapture(c.op); err != nil {
			return err
		}
		if err := n.refuseUnsafe(c.op); err != nil {
			return err
		}
		s.mu.Lock()
		pending := s.done < s.enq
		s.mu.Unlock()
		return c.ready(s.ctx, pending)
	})
}

// StreamWaitEvent is cuStreamWaitEvent: later work on s waits for the
// event's most recent record. Waiting, while capturing, on an event
// recorded in the capture of another stream joins s to that capture (the
// fork pattern).
func (n *Node) StreamWaitEvent(h cuda.Stream, e cuda.Event) error {
	return n.streamCall("cuStreamWaitEvent", h, uint64(e)).do(func(c *call) error {
		s := c.s
		ev, err := n.eventFor(c.op, e)
		if err != nil {
			return err
		}
		ev.mu.Lock()
		evCap, snap := ev.capture, ev.snap
		target := ev.rec
		ev.mu.Unlock()
		active := evCap != nil && evCap.invalid == nil && evCap.origin.capturingInto(evCap)
		s.mu.Lock()
		sCap := s.capture
		if active {
			switch {
			case sCap == nil:
				// Fork: s joins the capture.
				s.capture = evCap
				evCap.joined = append(evCap.joined, s)
				s.mu.Unlock()
				evCap.follow(s, snap)
				return nil
			case sCap == evCap:
				// Join within one capture: an edge of the graph.
				s.mu.Unlock()
				evCap.follow(s, snap)
				return nil
			}
		}
		s.mu.Unlock()
		if sCap != nil {
			sCap.invalid = c.errf(cuda.ErrorCaptureInvalidated, "waited on an event from outside the capture")
			return c.errf(cuda.ErrorCaptureUnsupported, "stream %#x is capturing and event %#x was not recorded in its capture", uint64(h), uint64(e))
		}
		return s.submitOp(op{name: c.op, run: func() error {
			ev.waitFor(target)
			return nil
		}})
	})
}

// StreamBeginCapture is cuStreamBeginCapture.
func (n *Node) StreamBeginCapture(h cuda.Stream, mode cuda.StreamCaptureMode) error {
	return n.call("cuStreamBeginCapture", -1, uint64(h), 0, 0).do(func(c *call) error {
		if mode < cuda.CaptureModeGlobal || mode > cuda.CaptureModeRelaxed {
			return c.errf(cuda.ErrorInvalidValue, "capture mode %d", mode)
		}
		s, err := c.stream(h)
		if err != nil {
			return err
		}
		if s.legacy {
			return c.errf(cuda.ErrorCaptureUnsupported, "the legacy default stream cannot be captured")
		}
		s.mu.Lock()
		defer s.mu.Unlock()
		if s.capture != nil {
			return c.errf(cuda.ErrorIllegalState, "stream %#x is already capturing", uint64(h))
		}
		s.capture = newCapture(s, mode, osthread.ID())
		s.captured = true
		return nil
	})
}

// StreamEndCapture is cuStreamEndCapture. Streams that joined the capture
// leave it too. A stream that joined it (a fork) and captured work that the
// origin stream did not wait for, through events, fails it with
// CUDA_ERROR_STREAM_CAPTURE_UNJOINED, as the driver does.
func (n *Node) StreamEndCapture(h cuda.Stream) (cuda.Graph, error) {
	return get(n.streamCall("cuStreamEndCapture", h, 0), func(c *call) (cuda.Graph, error) {
		s := c.s
		s.mu.Lock()
		capt := s.capture
		if capt == nil || capt.origin != s {
			s.mu.Unlock()
			return 0, c.errf(cuda.ErrorIllegalState, "stream %#x is not the origin of a capture", uint64(h))
		}
		s.capture = nil
		s.captured = false
		s.mu.Unlock()
		for _, j := range capt.joined {
			j.mu.Lock()
			if j.capture == capt {
				j.capture = nil
			}
			j.mu.Unlock()
		}
		if capt.invalid != nil {
			return 0, c.errf(cuda.ErrorCaptureInvalidated, "capture was invalidated: %v", capt.invalid)
		}
		if j := capt.unjoined(); j != nil {
			return 0, c.errf(cuda.ErrorCaptureUnjoined, "stream %#x forked from the capture and was not joined back into stream %#x", uint64(j.handle), uint64(h))
		}
		n.mu.Lock()
		defer n.mu.Unlock()
		g := cuda.Graph(n.newID())
		n.graphs[g] = &graph{capt.graph()}
		return g, nil
	})
}

// gnode is one op of a graph. It comes after the previous op of its lane
// (the stream it was captured on) and after the ops of other lanes that
// after lists (fork and join edges: indices of earlier nodes).
type gnode struct {
	op
	after []int
}

// dag is a graph's ops: nodes in capture order (an order in which every
// node comes after its edges' ends), the node indices of each lane in
// order, and the nodes that a node of another lane comes after.
type dag struct {
	nodes  []gnode
	lanes  [][]int
	waited []int
}

// clone returns a copy of d (edges are never modified, so shared).
func (d *dag) clone() dag {
	c := dag{nodes: append([]gnode(nil), d.nodes...), waited: d.waited, lanes: make([][]int, len(d.lanes))}
	for i, l := range d.lanes {
		c.lanes[i] = append([]int(nil), l...)
	}
	return c
}

// submitted runs the ops' onSubmit hooks, for a launch being enqueued.
func (d *dag) submitted() {
	for i := range d.nodes {
		if f := d.nodes[i].onSubmit; f != nil {
			f()
		}
	}
}

// run runs the graph as work of context ctx, as a GPU runs it: each lane's
// ops in order on a goroutine of its own (lane 0 on the caller's), an op
// once the ops of other lanes it comes after have finished, so that ops
// with no path between them run concurrently. It returns when every op
// has finished.
func (d *dag) run(ctx *context) {
	if len(d.lanes) <= 1 {
		for i := range d.nodes {
			d.nodes[i].exec(ctx)
		}
		return
	}
	done := make([]chan struct{}, len(d.nodes))
	for _, i := range d.waited {
		done[i] = make(chan struct{})
	}
	lane := func(l int) {
		for _, i := range d.lanes[l] {
			nd := &d.nodes[i]
			for _, a := range nd.after {
				<-done[a]
			}
			nd.exec(ctx)
			if done[i] != nil {
				close(done[i])
			}
		}
	}
	var wg sync.WaitGroup
	for l := 1; l < len(d.lanes); l++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			lane(l)
		}()
	}
	lane(0)
	wg.Wait()
}

// graph is a captured CUgraph.
type graph struct{ dag }

// graphExec is an instantiated graph: a copy of the graph's ops.
type graphExec struct{ dag }

// GraphInstantiate is cuGraphInstantiate.
func (n *Node) GraphInstantiate(g cuda.Graph) (cuda.GraphExec, error) {
	return get(n.call("cuGraphInstantiate", -1, uint64(g), 0, 0), func(c *call) (cuda.GraphExec, error) {
		n.mu.Lock()
		defer n.mu.Unlock()
		gr := n.graphs[g]
		if gr == nil {
			return 0, c.errf(cuda.ErrorInvalidValue, "graph %#x does not exist", uint64(g))
		}
		x := cuda.GraphExec(n.newID())
		n.execs[x] = &graphExec{gr.clone()}
		return x, nil
	})
}

// GraphLaunch is cuGraphLaunch: the graph runs as one op of the stream's
// work (dag.run: the captured streams' ops concurrently, in the order of
// the capture's forks and joins), which ends when all its ops have ended.
// Launched into a capture, it is one op of that capture (a child graph
// node), its ops run in the capturing stream's context.
func (n *Node) GraphLaunch(x cuda.GraphExec, h cuda.Stream) error {
	return n.call("cuGraphLaunch", -1, uint64(x), 0, 0).do(func(c *call) error {
		n.mu.Lock()
		ge := n.execs[x]
		n.mu.Unlock()
		if ge == nil {
			return c.errf(cuda.ErrorInvalidValue, "graph exec %#x does not exist", uint64(x))
		}
		s, err := c.stream(h)
		if err != nil {
			return err
		}
		if err := s.ctx.stickyErr(c.op); err != nil {
			return err
		}
		g := &ge.dag
		return s.submitOp(op{name: c.op, onSubmit: g.submitted, run: func() error {
			g.run(s.ctx)
			return nil
		}})
	})
}

// GraphExecDestroy is cuGraphExecDestroy.
func (n *Node) GraphExecDestroy(x cuda.GraphExec) error {
	return n.call("cuGraphExecDestroy", -1, uint64(x), 0, 0).do(func(c *call) error {
		return destroy(c, n.execs, x, cuda.ErrorInvalidValue, "graph exec")
	})
}

// GraphDestroy is cuGraphDestroy.
func (n *Node) GraphDestroy(g cuda.Graph) error {
	return n.call("cuGraphDestroy", -1, uint64(g), 0, 0).do(func(c *call) error {
		return destroy(c, n.graphs, g, cuda.ErrorInvalidValue, "graph")
	})
}

// event is a CUevent. rec counts records submitted, done records finished.
type event struct {
	ctx    *context
	handle cuda.Event
	flags  uint32

	mu      sync.Mutex
	cond    sync.Cond
	rec     uint64
	done    uint64
	at      time.Time
	capture *capture // the capture it was last recorded in, if any
	// snap is what that record's waiters come after (capture.snapshot).
	snap map[*stream]int
}

func (e *event) waitFor(target uint64) {
	e.mu.Lock()
	for e.done < target {
		e.cond.Wait()
	}
	e.mu.Unlock()
}

func (n *Node) eventFor(opName string, h cuda.Event) (*event, error) {
	n.mu.Lock()
	e := n.events[h]
	n.mu.Unlock()
	if e == nil {
		return nil, errf(opName, cuda.ErrorInvalidHandle, "event %#x does not exist", uint64(h))
	}
	return e, nil
}

// EventCreate is cuEventCreate on the current context.
func (n *Node) EventCreate(flags uint32) (cuda.Event, error) {
	return get(n.ctxCall("cuEventCreate", uint64(flags), 0, 0), func(c *call) (cuda.Event, error) {
		ctx := c.ctx
		if flags&^(cuda.EventBlockingSync|cuda.EventDisableTiming|4 /* interprocess */) != 0 {
			return 0, c.errf(cuda.ErrorInvalidValue, "flags %#x", flags)
		}
		n.mu.Lock()
		defer n.mu.Unlock()
		h := cuda.Event(n.newID())
		e := &event{ctx: ctx, handle: h, flags: flags}
		e.cond.L = &e.mu
		n.events[h] = e
		return h, nil
	})
}

// EventDestroy is cuEventDestroy.
func (n *Node) EventDestroy(h cuda.Event) error {
	return n.call("cuEventDestroy", -1, uint64(h), 0, 0).do(func(c *call) error {
		return destroy(c, n.events, h, cuda.ErrorInvalidHandle, "event")
	})
}

func (e *event) recordOp() op {
	return op{
		name: "cuEventRecord",
		onSubmit: func() {
			e.mu.Lock()
			e.rec++
			e.mu.Unlock()
		},
		run: func() error {
			e.mu.Lock()
			e.done++
			e.at = time.Now()
			e.cond.Broadcast()
			e.mu.Unlock()
			return nil
		},
	}
}

// EventRecord is cuEventRecord.
func (n *Node) EventRecord(h cuda.Event, sh cuda.Stream) error {
	return n.call("cuEventRecord", -1, uint64(h), uint64(sh), 0).do(func(c *call) error {
		e, err := n.eventFor(c.op, h)
		if err != nil {
			return err
		}
		s, err := c.stream(sh)
		if err != nil {
			return err
		}
		if err := s.implicitCapture(c.op); err != nil {
			return err
		}
		s.mu.Lock()
		capt := s.capture
		s.mu.Unlock()
		e.mu.Lock()
		e.capture, e.snap = capt, nil
		e.mu.Unlock()
		if err := s.submitOp(e.recordOp()); err != nil || capt == nil {
			return err
		}
		snap := capt.snapshot(s)
		e.mu.Lock()
		e.snap = snap
		e.mu.Unlock()
		return nil
	})
}

// EventSynchronize is cuEventSynchronize.
func (n *Node) EventSynchronize(h cuda.Event) error {
	return n.eventCall("cuEventSynchronize", h).do(func(c *call) error {
		e := c.e
		if err := n.refuseUnsafe(c.op); err != nil {
			return err
		}
		e.mu.Lock()
		target := e.rec
		e.mu.Unlock()
		e.waitFor(target)
		return e.ctx.stickyErr(c.op)
	})
}

// EventQuery is cuEventQuery: nil when the last record completed (or none
// was made), CUDA_ERROR_NOT_READY otherwise.
func (n *Node) EventQuery(h cuda.Event) error {
	return n.eventCall("cuEventQuery", h).do(func(c *call) error {
		e := c.e
		if err := n.refuseUnsafe(c.op); err != nil {
			return err
		}
		e.mu.Lock()
		pending := e.done < e.rec
		e.mu.Unlock()
		return c.ready(e.ctx, pending)
	})
}

// EventElapsedTime is cuEventElapsedTime: wall-clock milliseconds between
// the two events' completions (not hardware time).
func (n *Node) EventElapsedTime(start, end cuda.Event) (float32, error) {
	return get(n.call("cuEventElapsedTime", -1, uint64(start), uint64(end), 0), func(c *call) (float32, error) {
		a, err := n.eventFor(c.op, start)
		if err != nil {
			return 0, err
		}
		b, err := n.eventFor(c.op, end)
		if err != nil {
			return 0, err
		}
		var ta, tb time.Time
		for _, x := range []struct {
			e *event
			t *time.Time
		}{{a, &ta}, {b, &tb}} {
			x.e.mu.Lock()
			flags, rec, done, at := x.e.flags, x.e.rec, x.e.done, x.e.at
			x.e.mu.Unlock()
			if flags&cuda.EventDisableTiming != 0 {
				return 0, c.errf(cuda.ErrorInvalidHandle, "event %#x was created with CU_EVENT_DISABLE_TIMING", uint64(x.e.handle))
			}
			if rec == 0 {
				return 0, c.errf(cuda.ErrorInvalidHandle, "event %#x was never recorded", uint64(x.e.handle))
			}
			if done < rec {
				return 0, c.errf(cuda.ErrorNotReady, "event %#x has not completed", uint64(x.e.handle))
			}
			*x.t = at
		}
		return float32(tb.Sub(ta).Seconds() * 1000), nil
	})
}
