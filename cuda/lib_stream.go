package cuda

import "unsafe"

// StreamCreate is cuStreamCreate.
func (l *Lib) StreamCreate(flags uint32) (Stream, error) {
	var s Stream
	err := l.call(pStreamCreate, uintptr(unsafe.Pointer(&s)), uintptr(flags))
	return out(s, err)
}

// StreamDestroy is cuStreamDestroy (the _v2 ABI).
func (l *Lib) StreamDestroy(s Stream) error { return l.call(pStreamDestroy, uintptr(s)) }

// StreamSynchronize is cuStreamSynchronize.
func (l *Lib) StreamSynchronize(s Stream) error { return l.call(pStreamSynchronize, uintptr(s)) }

// StreamQuery is cuStreamQuery: nil when the stream is idle, an *Error
// matching ErrNotReady (the same value each time, so that polling does not
// allocate) while work is pending.
func (l *Lib) StreamQuery(s Stream) error { return l.query(pStreamQuery, uintptr(s)) }

// StreamGetCtx is cuStreamGetCtx (the CUDA 9.2 ABI): the context the
// stream was created in.
func (l *Lib) StreamGetCtx(s Stream) (Context, error) {
	var c Context
	err := l.call(pStreamGetCtx, uintptr(s), uintptr(unsafe.Pointer(&c)))
	return out(c, err)
}

// StreamWaitEvent is cuStreamWaitEvent(s, e, 0).
func (l *Lib) StreamWaitEvent(s Stream, e Event) error {
	return l.callHandles(pStreamWaitEvent, uintptr(s), uintptr(e), 0, 3)
}

// StreamBeginCapture is cuStreamBeginCapture (the CUDA 10.1 ABI, taking the
// capture mode).
func (l *Lib) StreamBeginCapture(s Stream, mode StreamCaptureMode) error {
	return l.call(pStreamBeginCapture, uintptr(s), uintptr(mode))
}

// StreamEndCapture is cuStreamEndCapture.
func (l *Lib) StreamEndCapture(s Stream) (Graph, error) {
	var g Graph
	err := l.call(pStreamEndCapture, uintptr(s), uintptr(unsafe.Pointer(&g)))
	return out(g, err)
}

// GraphInstantiate is cuGraphInstantiateWithFlags(g, 0).
func (l *Lib) GraphInstantiate(g Graph) (GraphExec, error) {
	var x GraphExec
	err := l.call(pGraphInstantiateWithFlags, uintptr(unsafe.Pointer(&x)), uintptr(g), 0)
	return out(x, err)
}

// GraphLaunch is cuGraphLaunch.
func (l *Lib) GraphLaunch(g GraphExec, s Stream) error {
	return l.callHandles(pGraphLaunch, uintptr(g), uintptr(s), 0, 2)
}

// GraphExecDestroy is cuGraphExecDestroy.
func (l *Lib) GraphExecDestroy(g GraphExec) error { return l.call(pGraphExecDestroy, uintptr(g)) }

// GraphDestroy is cuGraphDestroy.
func (l *Lib) GraphDestroy(g Graph) error { return l.call(pGraphDestroy, uintptr(g)) }

// EventCreate is cuEventCreate.
func (l *Lib) EventCreate(flags uint32) (Event, error) {
	var e Event
	err := l.call(pEventCreate, uintptr(unsafe.Pointer(&e)), uintptr(flags))
	return out(e, err)
}

// EventDestroy is cuEventDestroy (the _v2 ABI).
func (l *Lib) EventDestroy(e Event) error { return l.call(pEventDestroy, uintptr(e)) }

// EventRecord is cuEventRecord.
func (l *Lib) EventRecord(e Event, s Stream) error {
	return l.callHandles(pEventRecord, uintptr(e), uintptr(s), 0, 2)
}

// EventSynchronize is cuEventSynchronize.
func (l *Lib) EventSynchronize(e Event) error { return l.call(pEventSynchronize, uintptr(e)) }

// EventQuery is cuEventQuery: nil when the event completed, an *Error
// matching ErrNotReady (the same value each time) otherwise.
func (l *Lib) EventQuery(e Event) error { return l.query(pEventQuery, uintptr(e)) }

// EventElapsedTime is cuEventElapsedTime: milliseconds from start to end.
func (l *Lib) EventElapsedTime(start, end Event) (float32, error) {
	var ms float32
	err := l.call(pEventElapsedTime, uintptr(unsafe.Pointer(&ms)), uintptr(start), uintptr(end))
	return out(ms, err)
}
