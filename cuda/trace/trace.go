// Package trace is a cuda.Driver decorator that logs every driver call,
// with its arguments, results and error, at the TRACE level of log/slog
// (NVLS_DEBUG=TRACE).
package trace

//go:generate go run gen.go

import (
	"context"
	"fmt"
	"log/slog"
	"unsafe"

	"github.com/nvls-go/nvls/cuda"
)

// LevelTrace is the slog level of driver-call lines: below DEBUG.
const LevelTrace = slog.Level(-8)

// Driver logs every call of the cuda.Driver it wraps at LevelTrace, then
// returns the wrapped call's results unchanged.
type Driver struct {
	d cuda.Driver
	l *slog.Logger
}

var _ cuda.Driver = (*Driver)(nil)

// New wraps d. Each call is logged to l at LevelTrace.
func New(d cuda.Driver, l *slog.Logger) *Driver { return &Driver{d: d, l: l} }

// Unwrap returns the wrapped driver.
func (t *Driver) Unwrap() cuda.Driver { return t.d }

func (t *Driver) log(op string, err error, args, outs []any) {
	ctx := context.Background()
	if !t.l.Enabled(ctx, LevelTrace) {
		return
	}
	attrs := make([]any, 0, 3+len(args)+len(outs))
	attrs = append(attrs, slog.String("call", op))
	attrs = append(attrs, args...)
	attrs = append(attrs, outs...)
	if err != nil {
		attrs = append(attrs, slog.String("err", err.Error()))
	} else {
		attrs = append(attrs, slog.String("result", "ok"))
	}
	t.l.Log(ctx, LevelTrace, "cuda", attrs...)
}

// arg formats one argument or result for the log: handles and addresses
// in hex, structs by field, byte slices by length.
func arg(name string, v any) slog.Attr {
	switch x := v.(type) {
	case cuda.DevicePtr:
		return slog.String(name, fmt.Sprintf("%#x", uint64(x)))
	case cuda.MemHandle:
		return slog.String(name, fmt.Sprintf("%#x", uint64(x)))
	case cuda.Context, cuda.Stream, cuda.Event, cuda.Module, cuda.Function, cuda.Graph, cuda.GraphExec:
		return slog.String(name, fmt.Sprintf("%#x", x))
	case unsafe.Pointer:
		return slog.String(name, fmt.Sprintf("%p", x))
	case []byte:
		return slog.Int(name+"_len", len(x))
	case *cuda.AllocationProp:
		if x == nil {
			return slog.String(name, "nil")
		}
		return slog.String(name, fmt.Sprintf("%+v", *x))
	case *cuda.MulticastProp:
		if x == nil {
			return slog.String(name, "nil")
		}
		return slog.String(name, fmt.Sprintf("{NumDevices:%d Size:%d HandleTypes:%#x Flags:%#x}", x.NumDevices, x.Size, x.HandleTypes, x.Flags))
	case cuda.ShareableHandle:
		if x.Type == cuda.HandleFabric {
			return slog.String(name, "fabric handle")
		}
		return slog.String(name, fmt.Sprintf("%v fd=%d", x.Type, x.FD))
	case fmt.Stringer:
		return slog.String(name, x.String())
	}
	return slog.Any(name, v)
}
