package sim

import (
	"fmt"
	"strings"

	"github.com/nvls-go/nvls/cuda"
)

// Call is one recorded driver call.
type Call struct {
	// Op is the driver entry point, e.g. "cuMemCreate".
	Op string
	// Device is the device the call applies to, -1 where none does.
	Device int
	// Arg, Addr and Size are the call's key arguments where it has them:
	// a handle, attribute or other value (Arg), a device address (Addr), a
	// size in bytes (Size).
	Arg, Addr, Size uint64
	// Result is the call's outcome (cuda.Success, or the failure's code).
	Result cuda.Result
	// Injected is true when the failure came from FailAt or FailNth.
	Injected bool
}

func (c Call) String() string {
	var b strings.Builder
	b.WriteString(c.Op)
	b.WriteByte('(')
	sep := ""
	if c.Device >= 0 {
		fmt.Fprintf(&b, "dev=%d", c.Device)
		sep = " "
	}
	if c.Arg != 0 {
		fmt.Fprintf(&b, "%sarg=%#x", sep, c.Arg)
		sep = " "
	}
	if c.Addr != 0 {
		fmt.Fprintf(&b, "%saddr=%#x", sep, c.Addr)
		sep = " "
	}
	if c.Size != 0 {
		fmt.Fprintf(&b, "%ssize=%d", sep, c.Size)
	}
	b.WriteByte(')')
	if c.Result != cuda.Success {
		b.WriteString(" = ")
		b.WriteString(c.Result.String())
		if c.Injected {
			b.WriteString(" (injected)")
		}
	}
	return b.String()
}

type fault struct {
	op   string // "" for any entry point
	nth  int    // 1-based, counted from when the fault was set
	seen int
	code cuda.Result
}

// FailAt makes the nth call (1-based, counted from now) of the entry point
// op (e.g. "cuMulticastBindMem") fail with code, without side effects.
// Each fault fires once.
func (n *Node) FailAt(op string, nth int, code cuda.Result) {
	n.logMu.Lock()
	defer n.logMu.Unlock()
	n.faults = append(n.faults, fault{op: op, nth: nth, code: code})
}

// FailNth makes the nth driver call of any kind (1-based, counted from
// now) fail with code, without side effects. A test that counted the calls
// of a setup (len(Calls())) iterates nth over all of them to prove that
// every failure unwinds. Each fault fires once.
func (n *Node) FailNth(nth int, code cuda.Result) { n.FailAt("", nth, code) }

// ClearFaults drops the faults that have not fired.
func (n *Node) ClearFaults() {
	n.logMu.Lock()
	defer n.logMu.Unlock()
	n.faults = nil
}

// Calls returns the recorded driver calls, oldest first.
func (n *Node) Calls() []Call {
	n.logMu.Lock()
	defer n.logMu.Unlock()
	return append([]Call(nil), n.log...)
}

// CallCount returns how many driver calls were made since the last
// ResetCalls, including those the log had no room for.
func (n *Node) CallCount() int {
	n.logMu.Lock()
	defer n.logMu.Unlock()
	return n.nCalls
}

// CallsOf returns the recorded calls of one entry point.
func (n *Node) CallsOf(op string) []Call {
	n.logMu.Lock()
	defer n.logMu.Unlock()
	var out []Call
	for _, c := range n.log {
		if c.Op == op {
			out = append(out, c)
		}
	}
	return out
}

// ResetCalls empties the call log.
func (n *Node) ResetCalls() {
	n.logMu.Lock()
	defer n.logMu.Unlock()
	n.log = nil
	n.logDropped = 0
	n.nCalls = 0
}

// call is one entry point in progress: its name, what the log shows of its
// arguments, and its place in the log. An entry point's body uses it to
// name its errors and to fill in the device once it is known.
type call struct {
	n    *Node
	op   string
	dev  int
	arg  uint64
	addr uint64
	size uint64
	idx  int // index in the log once entered, -1 when not kept

	// What the call acts on, resolved before its body runs: the current
	// context (ctxCall), or the stream or event whose handle is its arg
	// (streamCall, eventCall).
	on  subject
	ctx *context
	s   *stream
	e   *event
}

type subject int

const (
	onNothing subject = iota
	onCurrent
	onStream
	onEvent
)

// call describes a call of the entry point op for the log: the device it
// applies to (-1 where none or not yet known), its key argument, address
// and size (see Call). do or get runs it.
func (n *Node) call(op string, dev int, arg, addr, size uint64) *call {
	return &call{n: n, op: op, dev: dev, arg: arg, addr: addr, size: size, idx: -1}
}

// ctxCall is call for an entry point that acts on the calling thread's
// current context: do and get resolve that context before the body runs
// (or fail the call without one), and the body finds it in c.ctx.
func (n *Node) ctxCall(op string, arg, addr, size uint64) *call {
	c := n.call(op, -1, arg, addr, size)
	c.on = onCurrent
	return c
}

// streamCall is call for an entry point on stream h (logged as its arg):
// the body finds the stream in c.s.
func (n *Node) streamCall(op string, h cuda.Stream, addr uint64) *call {
	c := n.call(op, -1, uint64(h), addr, 0)
	c.on = onStream
	return c
}

// eventCall is call for an entry point on event h (logged as its arg): the
// body finds the event in c.e.
func (n *Node) eventCall(op string, h cuda.Event) *call {
	c := n.call(op, -1, uint64(h), 0, 0)
	c.on = onEvent
	return c
}

// do runs body as the call: the call is logged, a pending fault, the cuInit
// rule or what it acts on being absent (ctxCall, streamCall, eventCall)
// fails it before body runs, and body's outcome is logged.
func (c *call) do(body func(c *call) error) error {
	if err := c.begin(); err != nil {
		return err
	}
	err := body(c)
	c.leave(err)
	return err
}

// get is do for an entry point that returns a value.
func get[T any](c *call, body func(c *call) (T, error)) (T, error) {
	if err := c.begin(); err != nil {
		var zero T
		return zero, err
	}
	v, err := body(c)
	c.leave(err)
	return v, err
}

// begin enters the call and resolves what it acts on.
func (c *call) begin() error {
	if err := c.enter(); err != nil {
		return err
	}
	var err error
	switch c.on {
	case onCurrent:
		c.ctx, err = c.current()
	case onStream:
		c.s, err = c.stream(cuda.Stream(c.arg))
	case onEvent:
		c.e, err = c.event(cuda.Event(c.arg))
	}
	if err != nil {
		c.leave(err)
	}
	return err
}

// enter records the call and applies fault injection and the cuInit rule.
func (c *call) enter() error {
	n := c.n
	n.logMu.Lock()
	defer n.logMu.Unlock()
	n.nCalls++
	if len(n.log) < n.cfg.CallLogLimit {
		c.idx = len(n.log)
		n.log = append(n.log, Call{Op: c.op, Device: c.dev, Arg: c.arg, Addr: c.addr, Size: c.size})
	} else {
		n.logDropped++
	}
	for k := 0; k < len(n.faults); k++ {
		f := &n.faults[k]
		if f.op != "" && f.op != c.op {
			continue
		}
		f.seen++
		if f.seen == f.nth {
			code := f.code
			n.faults = append(n.faults[:k], n.faults[k+1:]...)
			if c.idx >= 0 {
				n.log[c.idx].Result = code
				n.log[c.idx].Injected = true
			}
			return cuda.NewError(c.op, code, "injected fault")
		}
	}
	if c.op != "cuInit" && c.op != "cuDriverGetVersion" && !n.inited.Load() {
		if c.idx >= 0 {
			n.log[c.idx].Result = cuda.ErrorNotInitialized
		}
		return cuda.NewError(c.op, cuda.ErrorNotInitialized, "cuInit has not been called")
	}
	return nil
}

// leave records the outcome of the call.
func (c *call) leave(err error) {
	if c.idx < 0 || err == nil {
		return
	}
	code := cuda.ErrorUnknown
	if e, ok := err.(*cuda.Error); ok {
		code = e.Code
	}
	n := c.n
	n.logMu.Lock()
	if c.idx < len(n.log) {
		n.log[c.idx].Result = code
	}
	n.logMu.Unlock()
}

// device fills in the device of the call once it is known (calls that act
// on the current context, a stream or a handle learn it after they begin).
func (c *call) device(d cuda.Device) {
	if c.idx < 0 {
		return
	}
	n := c.n
	n.logMu.Lock()
	if c.idx < len(n.log) {
		n.log[c.idx].Device = int(d)
	}
	n.logMu.Unlock()
}

// errf is the *cuda.Error the call fails with.
func (c *call) errf(code cuda.Result, format string, args ...any) error {
	return errf(c.op, code, format, args...)
}

// checkDevice fails the call when d is not a device of the node.
func (c *call) checkDevice(d cuda.Device) error { return c.n.checkDevice(c.op, d) }

// current is the calling thread's current context, which the call then
// applies to.
func (c *call) current() (*context, error) {
	ctx, err := c.n.cur(c.op)
	if err == nil {
		c.device(ctx.dev)
	}
	return ctx, err
}

// stream resolves the stream handle h, whose device the call then
// applies to.
func (c *call) stream(h cuda.Stream) (*stream, error) {
	s, err := c.n.streamFor(c.op, h)
	if err == nil {
		c.device(s.ctx.dev)
	}
	return s, err
}

// event resolves the event handle h, whose device the call then applies
// to.
func (c *call) event(h cuda.Event) (*event, error) {
	e, err := c.n.eventFor(c.op, h)
	if err == nil {
		c.device(e.ctx.dev)
	}
	return e, err
}

// destroy removes handle h from table, one of the node's handle maps, or
// fails the call with code when h is not there ("<what> %#x does not
// exist").
func destroy[H ~uintptr, V any](c *call, table map[H]*V, h H, code cuda.Result, what string) error {
	c.n.mu.Lock()
	defer c.n.mu.Unlock()
	if table[h] == nil {
		return c.errf(code, "%s %#x does not exist", what, uint64(h))
	}
	delete(table, h)
	return nil
}
