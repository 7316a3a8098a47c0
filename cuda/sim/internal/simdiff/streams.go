package simdiff

import (
	"fmt"

	"github.com/nvls-go/nvls/cuda"
	"github.com/nvls-go/nvls/internal/kabi"
)

// Streams, events and captures. The model keeps the work of the sequence
// ordered so that no two pieces of work in flight touch memory in an order
// the driver leaves open: before work goes to a stream, order makes it
// follow everything in flight, by the streams' implicit order (the legacy
// default stream and blocking streams), or with calls the sequence draws
// (a stream synchronization, or an event recorded and waited on). So every
// result compared is one the driver determines.

// order makes the next work on s follow all work in flight.
func (r *runner) order(s *strm) {
	t := r.m.tail
	if r.stopped || t == nil || t == s {
		return
	}
	if (t.legacy && !s.nonBlocking) || (s.legacy && !t.nonBlocking) {
		return
	}
	if len(r.m.events) > 0 && r.chance(0.5) {
		e := pick(r, r.m.events)
		if both(r.eventRecord(e, t)) {
			r.streamWaitEvent(s, e)
			return
		}
	}
	r.streamSync(t)
}

// enqueued records that work went to s (when the call rs succeeded on
// both sides: a failed call enqueued nothing): s is the new tail.
func (r *runner) enqueued(s *strm, rs [2]res) {
	if r.stopped || !both(rs) {
		return
	}
	r.m.tail, r.m.tailEvent = s, nil
}

// nonLegacy lists the streams the sequence created.
func (r *runner) nonLegacy() []*strm { return r.m.streams[1:] }

func (r *runner) opStreamCreate() bool {
	flags := pick(r, []uint32{cuda.StreamDefault, cuda.StreamNonBlocking})
	if r.probe(0.1) {
		flags = 2
	}
	st := &strm{id: r.m.id(), nonBlocking: flags == cuda.StreamNonBlocking}
	rs := r.call(fmt.Sprintf("cuStreamCreate(flags %d) -> stream%d", flags, st.id), false, func(i int, s *side) res {
		h, err := s.D.StreamCreate(flags)
		st.h[i], st.ok[i] = h, err == nil
		return resOf(err)
	})
	if rs[0].ok() || rs[1].ok() {
		r.m.streams = append(r.m.streams, st)
	}
	return true
}

func (r *runner) opStreamDestroy() bool {
	ss := r.nonLegacy()
	if len(ss) == 0 {
		return false
	}
	r.streamDestroy(pick(r, ss))
	return true
}

func (r *runner) streamDestroy(st *strm) {
	if r.m.tail == st {
		r.checkpoint(true)
	}
	r.call(fmt.Sprintf("cuStreamDestroy(stream%d)", st.id), false, func(i int, s *side) res {
		return resOf(s.D.StreamDestroy(st.h[i]))
	})
	if !r.stopped {
		r.m.streams = removeItem(r.m.streams, st)
	}
}

func (r *runner) opStreamSync() bool {
	r.streamSync(r.pickStream())
	return true
}

// streamSync synchronizes st; when st was the tail, nothing is in flight
// any more and what async work wrote is compared.
func (r *runner) streamSync(st *strm) {
	r.call(fmt.Sprintf("cuStreamSynchronize(stream%d)", st.id), false, func(i int, s *side) res {
		return resOf(s.D.StreamSynchronize(st.h[i]))
	})
	if !r.stopped && r.m.tail == st {
		r.m.tail, r.m.tailEvent = nil, nil
		r.checkpoint(false)
	}
}

func (r *runner) opStreamQuery() bool {
	st := r.pickStream()
	racy := r.m.tail != nil
	r.call(fmt.Sprintf("cuStreamQuery(stream%d)", st.id), racy, func(i int, s *side) res {
		return resOf(s.D.StreamQuery(st.h[i]))
	})
	return true
}

func (r *runner) opStreamGetCtx() bool {
	st := r.pickStream()
	r.query(fmt.Sprintf("cuStreamGetCtx(stream%d)", st.id), false, func(i int, s *side) res {
		c, err := s.D.StreamGetCtx(st.h[i])
		return resOf(err, fmt.Sprintf("current=%v", c == s.ctx))
	})
	return true
}

func (r *runner) opStreamWaitEvent() bool {
	if len(r.m.events) == 0 {
		return false
	}
	st := r.pickStream()
	r.order(st)
	r.enqueued(st, r.streamWaitEvent(st, pick(r, r.m.events)))
	return true
}

// streamWaitEvent makes st wait for e's last record.
func (r *runner) streamWaitEvent(st *strm, e *evt) [2]res {
	return r.call(fmt.Sprintf("cuStreamWaitEvent(stream%d, event%d)", st.id, e.id), false, func(i int, s *side) res {
		return resOf(s.D.StreamWaitEvent(st.h[i], e.h[i]))
	})
}

func (r *runner) opEventCreate() bool {
	flags := pick(r, []uint32{cuda.EventDefault, cuda.EventBlockingSync, cuda.EventDisableTiming, cuda.EventBlockingSync | cuda.EventDisableTiming})
	if r.probe(0.1) {
		flags = 0x10
	}
	e := &evt{id: r.m.id(), flags: flags}
	rs := r.call(fmt.Sprintf("cuEventCreate(flags %#x) -> event%d", flags, e.id), false, func(i int, s *side) res {
		h, err := s.D.EventCreate(flags)
		e.h[i], e.ok[i] = h, err == nil
		return resOf(err)
	})
	if rs[0].ok() || rs[1].ok() {
		r.m.events = append(r.m.events, e)
	}
	return true
}

func (r *runner) opEventRecord() bool {
	if len(r.m.events) == 0 {
		return false
	}
	r.eventRecord(pick(r, r.m.events), r.pickStream())
	return true
}

// eventRecord records e on st. A record is work like any other: ordered
// after the work in flight, it becomes the tail, and e (until recorded
// elsewhere or the tail moves) says when everything in flight is done.
func (r *runner) eventRecord(e *evt, st *strm) [2]res {
	r.order(st)
	rs := r.call(fmt.Sprintf("cuEventRecord(event%d, stream%d)", e.id, st.id), false, func(i int, s *side) res {
		return resOf(s.D.EventRecord(e.h[i], st.h[i]))
	})
	if !both(rs) {
		return rs
	}
	e.recorded = true
	r.enqueued(st, rs)
	r.m.tailEvent = e
	return rs
}

func (r *runner) opEventQuery() bool {
	if len(r.m.events) == 0 {
		return false
	}
	e := pick(r, r.m.events)
	racy := e.recorded && r.m.tail != nil
	r.call(fmt.Sprintf("cuEventQuery(event%d)", e.id), racy, func(i int, s *side) res {
		return resOf(s.D.EventQuery(e.h[i]))
	})
	return true
}

func (r *runner) opEventSync() bool {
	if len(r.m.events) == 0 {
		return false
	}
	e := pick(r, r.m.events)
	r.call(fmt.Sprintf("cuEventSynchronize(event%d)", e.id), false, func(i int, s *side) res {
		return resOf(s.D.EventSynchronize(e.h[i]))
	})
	if !r.stopped && e == r.m.tailEvent {
		r.m.tail, r.m.tailEvent = nil, nil
		r.checkpoint(false)
	}
	return true
}

func (r *runner) opElapsed() bool {
	if len(r.m.events) == 0 || r.m.tail != nil {
		return false
	}
	a, b := pick(r, r.m.events), pick(r, r.m.events)
	r.query(fmt.Sprintf("cuEventElapsedTime(event%d, event%d) [recorded: %v, %v; flags %#x, %#x]", a.id, b.id, a.recorded, b.recorded, a.flags, b.flags), false, func(i int, s *side) res {
		_, err := s.D.EventElapsedTime(a.h[i], b.h[i])
		return resOf(err)
	})
	return true
}

func (r *runner) opEventDestroy() bool {
	if len(r.m.events) == 0 {
		return false
	}
	r.eventDestroy(pick(r, r.m.events))
	return true
}

func (r *runner) eventDestroy(e *evt) {
	r.call(fmt.Sprintf("cuEventDestroy(event%d)", e.id), false, func(i int, s *side) res {
		return resOf(s.D.EventDestroy(e.h[i]))
	})
	if !r.stopped {
		r.m.events = removeItem(r.m.events, e)
		if r.m.tailEvent == e {
			r.m.tailEvent = nil
		}
	}
}

// captured is one call recorded into a capture: what a launch of the
// graph does to the model.
type captured struct {
	effect func()
	spans  []span
}

// opCapture captures one to three calls on a stream into a graph,
// instantiates it and launches it one to three times, then destroys both.
// Probes: a capture of the legacy stream, an invalid mode, and a use of
// the legacy stream from the capturing thread while the capture runs.
func (r *runner) opCapture() bool {
	ss := r.nonLegacy()
	if len(ss) == 0 {
		return false
	}
	if r.probe(0.05) {
		r.call("cuStreamBeginCapture(stream0, thread-local) [the legacy stream]", false, func(i int, s *side) res {
			return resOf(s.D.StreamBeginCapture(0, cuda.CaptureModeThreadLocal))
		})
		return true
	}
	st, mode, lp, ok := r.beginCapture(ss)
	if !ok {
		return true
	}
	var caps []captured
	for k := 1 + r.rng.IntN(3); k > 0 && !r.stopped; k-- {
		if c, ok := r.captureOne(st, lp); ok {
			caps = append(caps, c)
		}
	}
	if r.probe(0.08) {
		r.legacyDuringCapture(st, mode)
	}
	if g, ok := r.endCapture(st); ok {
		r.replay(g, caps)
	}
	return true
}

// beginCapture draws a stream of ss, a capture mode (now and then an
// invalid one) and, at times, the kernel launch to capture (lp), and
// begins the capture; ok when it began on both sides.
func (r *runner) beginCapture(ss []*strm) (st *strm, mode cuda.StreamCaptureMode, lp *launchPlan, ok bool) {
	st = pick(r, ss)
	mode = pick(r, []cuda.StreamCaptureMode{cuda.CaptureModeThreadLocal, cuda.CaptureModeThreadLocal, cuda.CaptureModeGlobal, cuda.CaptureModeRelaxed})
	if r.probe(0.05) {
		mode = 7
	}
	// A kernel in the graph needs its signal area zeroed before.
	if r.chance(0.4) {
		lp = r.planLaunch()
	}
	r.checkpoint(true)
	rs := r.call(fmt.Sprintf("cuStreamBeginCapture(stream%d, mode %d)", st.id, mode), false, func(i int, s *side) res {
		return resOf(s.D.StreamBeginCapture(st.h[i], mode))
	})
	return st, mode, lp, both(rs)
}

// endCapture ends st's capture; ok when both sides returned a graph (a
// graph only one side returned is destroyed).
func (r *runner) endCapture(st *strm) (g [2]cuda.Graph, ok bool) {
	rs := r.call(fmt.Sprintf("cuStreamEndCapture(stream%d)", st.id), false, func(i int, s *side) res {
		x, err := s.D.StreamEndCapture(st.h[i])
		g[i] = x
		return resOf(err)
	})
	if both(rs) {
		return g, true
	}
	for i := range 2 {
		if rs[i].ok() {
			_ = r.sides[i].D.GraphDestroy(g[i])
		}
	}
	return g, false
}

// replay instantiates graph g, launches it (launchGraph) and destroys
// both.
func (r *runner) replay(g [2]cuda.Graph, caps []captured) {
	var x [2]cuda.GraphExec
	inst := r.call("cuGraphInstantiate(graph)", false, func(i int, s *side) res {
		e, err := s.D.GraphInstantiate(g[i])
		x[i] = e
		return resOf(err)
	})
	if both(inst) {
		r.launchGraph(x, caps)
	}
	if r.stopped {
		// Quietly: the sequence is over.
		for i, sd := range r.sides {
			if inst[i].ok() {
				_ = sd.D.GraphExecDestroy(x[i])
			}
			_ = sd.D.GraphDestroy(g[i])
		}
		return
	}
	if both(inst) {
		r.call("cuGraphExecDestroy(exec)", false, func(i int, s *side) res { return resOf(s.D.GraphExecDestroy(x[i])) })
	}
	r.call("cuGraphDestroy(graph)", false, func(i int, s *side) res { return resOf(s.D.GraphDestroy(g[i])) })
	if r.chance(0.5) {
		r.checkpoint(true)
	}
}

// launchGraph launches x one to three times on a drawn stream; each
// launch does the captured calls' effects to the model.
func (r *runner) launchGraph(x [2]cuda.GraphExec, caps []captured) {
	on := r.pickStream()
	for k := 1 + r.rng.IntN(3); k > 0 && !r.stopped; k-- {
		r.order(on)
		rs := r.call(fmt.Sprintf("cuGraphLaunch(graph of %d calls, stream%d)", len(caps), on.id), false, func(i int, s *side) res {
			return resOf(s.D.GraphLaunch(x[i], on.h[i]))
		})
		if !both(rs) {
			return
		}
		r.enqueued(on, rs)
		for _, c := range caps {
			c.effect()
			r.m.dirty = append(r.m.dirty, c.spans...)
		}
	}
}

// captureOne records one async call on the capturing stream st: a memset,
// a device-to-device copy, or the kernel launch lp.
func (r *runner) captureOne(st *strm, lp *launchPlan) (captured, bool) {
	if lp != nil && r.chance(0.5) {
		rs := r.call(lp.desc(st), false, func(i int, s *side) res { return lp.launch(i, s, st) })
		return captured{effect: lp.effect, spans: lp.spans}, both(rs)
	}
	// The kernel's signal area stays as zeroed before the capture: the
	// barrier would wait on garbage counters until its timeout.
	hitsSignal := func(g region, off, n uint64) bool {
		return lp != nil && g == lp.g && off < kabi.SignalBytes
	}
	if r.chance(0.5) {
		g, off, n, ok := r.target(256<<10, 1)
		if !ok || hitsSignal(g, off, n) {
			return captured{}, false
		}
		v := uint8(r.rng.Uint32())
		rs := r.call(fmt.Sprintf("cuMemsetD8Async(%v+%#x, %#x, %d, stream%d) [captured]", g, off, v, n, st.id), false, func(i int, s *side) res {
			return resOf(s.D.MemsetD8Async(g.ptr(i)+cuda.DevicePtr(off), v, n, st.h[i]))
		})
		return captured{effect: func() { g.write(off, n) }, spans: []span{{g, off, n}}}, both(rs)
	}
	src, soff, n, ok := r.target(256<<10, 1)
	if !ok {
		return captured{}, false
	}
	dst := pick(r, r.m.regions())
	if dst.size() < n {
		return captured{}, false
	}
	doff := uint64(r.rng.IntN(int(dst.size()-n) + 1))
	sp, sb := src.phys()
	dp, db := dst.phys()
	if sp == dp && sb+soff < db+doff+n && db+doff < sb+soff+n || hitsSignal(dst, doff, n) {
		return captured{}, false
	}
	rs := r.call(fmt.Sprintf("cuMemcpyDtoDAsync(%v+%#x <- %v+%#x, %d, stream%d) [captured]", dst, doff, src, soff, n, st.id), false, func(i int, s *side) res {
		return resOf(s.D.MemcpyDtoDAsync(dst.ptr(i)+cuda.DevicePtr(doff), src.ptr(i)+cuda.DevicePtr(soff), n, st.h[i]))
	})
	return captured{effect: func() { src.copyTo(soff, dst, doff, n) }, spans: []span{{dst, doff, n}}}, both(rs)
}

// legacyDuringCapture probes a use of the legacy default stream from the
// capturing thread while st captures in mode: a synchronous memset, an
// async one on the legacy stream, an event record there, or its query or
// synchronization. With st blocking, the driver refuses a synchronous
// memset with CUDA_ERROR_STREAM_CAPTURE_IMPLICIT (580.159.04); the CUDA
// programming guide calls every use of the legacy stream then invalid, and
// the capture invalidated (the cuStreamEndCapture after it compares). Where
// both sides run a memset, it wrote.
func (r *runner) legacyDuringCapture(st *strm, mode cuda.StreamCaptureMode) {
	kind := map[bool]string{true: "non-blocking", false: "blocking"}[st.nonBlocking]
	during := fmt.Sprintf("[during a capture of stream%d, %s, mode %d]", st.id, kind, mode)
	legacy := r.m.streams[0]
	switch k := r.rng.IntN(6); {
	case k < 3:
		g, off, n, ok := r.target(4096, 1)
		if !ok {
			return
		}
		sync := k < 2
		name := map[bool]string{true: "cuMemsetD8", false: "cuMemsetD8Async"}[sync]
		rs := r.call(fmt.Sprintf("%s(%v+%#x, 0, %d, stream0) %s", name, g, off, n, during), false, func(i int, s *side) res {
			if sync {
				return resOf(s.D.MemsetD8(g.ptr(i)+cuda.DevicePtr(off), 0, n))
			}
			return resOf(s.D.MemsetD8Async(g.ptr(i)+cuda.DevicePtr(off), 0, n, legacy.h[i]))
		})
		if both(rs) {
			g.write(off, n)
			r.m.dirty = append(r.m.dirty, span{g, off, n})
			r.enqueued(legacy, rs)
		}
	case k == 3:
		if len(r.m.events) == 0 {
			return
		}
		e := pick(r, r.m.events)
		rs := r.call(fmt.Sprintf("cuEventRecord(event%d, stream0) %s", e.id, during), false, func(i int, s *side) res {
			return resOf(s.D.EventRecord(e.h[i], legacy.h[i]))
		})
		if both(rs) {
			e.recorded = true
			r.enqueued(legacy, rs)
			r.m.tailEvent = e
		}
	case k == 4:
		r.call(fmt.Sprintf("cuStreamQuery(stream0) %s", during), false, func(i int, s *side) res {
			return resOf(s.D.StreamQuery(legacy.h[i]))
		})
	default:
		rs := r.call(fmt.Sprintf("cuStreamSynchronize(stream0) %s", during), false, func(i int, s *side) res {
			return resOf(s.D.StreamSynchronize(legacy.h[i]))
		})
		if both(rs) && r.m.tail == legacy {
			r.m.tail, r.m.tailEvent = nil, nil
		}
	}
}
