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

// enter records a call and applies fault injection and the cuInit rule. It
// returns the call's index in the log (-1 when not kept) for leave.
func (n *Node) enter(op string, dev int, arg, addr, size uint64) (int, error) {
	n.logMu.Lock()
	defer n.logMu.Unlock()
	n.nCalls++
	idx := -1
	if len(n.log) < n.cfg.CallLogLimit {
		idx = len(n.log)
		n.log = append(n.log, Call{Op: op, Device: dev, Arg: arg, Addr: addr, Size: size})
	} else {
		n.logDropped++
	}
	for k := 0; k < len(n.faults); k++ {
		f := &n.faults[k]
		if f.op != "" && f.op != op {
			continue
		}
		f.seen++
		if f.seen == f.nth {
			code := f.code
			n.faults = append(n.faults[:k], n.faults[k+1:]...)
			if idx >= 0 {
				n.log[idx].Result = code
				n.log[idx].Injected = true
			}
			return idx, cuda.NewError(op, code, "injected fault")
		}
	}
	if op != "cuInit" && op != "cuDriverGetVersion" && !n.inited.Load() {
		if idx >= 0 {
			n.log[idx].Result = cuda.ErrorNotInitialized
		}
		return idx, cuda.NewError(op, cuda.ErrorNotInitialized, "cuInit has not been called")
	}
	return idx, nil
}

// leave records the outcome of the call enter returned idx for.
func (n *Node) leave(idx int, errp *error) {
	if idx < 0 || *errp == nil {
		return
	}
	code := cuda.ErrorUnknown
	if e, ok := (*errp).(*cuda.Error); ok {
		code = e.Code
	}
	n.logMu.Lock()
	if idx < len(n.log) {
		n.log[idx].Result = code
	}
	n.logMu.Unlock()
}

// setCallDevice fills in the device of a call once it is known (calls that
// act on the current context learn their device after enter).
func (n *Node) setCallDevice(idx int, d cuda.Device) {
	if idx < 0 {
		return
	}
	n.logMu.Lock()
	if idx < len(n.log) {
		n.log[idx].Device = int(d)
	}
	n.logMu.Unlock()
}
