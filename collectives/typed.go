package collectives

import (
	"context"
	"fmt"

	"github.com/nvls-go/nvls/cuda"
)

// The typed collectives: NCCL's semantics on Buffers, whose element type
// and length give the dtype and count, enqueued on s (nil: the default
// streams). h is a *Comm (every local rank's part at once) or a *Rank
// (its own part; the call runs when every local rank's part has come:
// Handle). They check their buffers' lengths against each other and
// return; Wait waits. send == recv (the same *Buffer, or views of the
// same memory) runs in place. Every rank of the team makes the same calls
// in the same order (under mpirun, each process for its one local rank).

// AllReduce reduces send with op over every rank into every rank's recv
// (of send's length).
func AllReduce[T Type](ctx context.Context, h Handle, send, recv *Buffer[T], op Op, s *Streams) error {
	c, _ := h.parts()
	if err := sameLen(c, "AllReduce", send, recv, 1); err != nil {
		return err
	}
	n, dt := uint64(recv.n), recv.DType()
	return issue(ctx, h, callKey{op: "AllReduce", dt: dt, count: recv.n, redop: op}, send, recv, s,
		func(sp, rp []cuda.DevicePtr, st []cuda.Stream) error { return c.AllReduce(ctx, sp, rp, n, dt, op, st) })
}

// Broadcast copies team rank root's send into every rank's recv (of
// send's length). Only the root's send is read.
func Broadcast[T Type](ctx context.Context, h Handle, send, recv *Buffer[T], root int, s *Streams) error {
	c, _ := h.parts()
	if err := sameLen(c, "Broadcast", send, recv, 1); err != nil {
		return err
	}
	n, dt := uint64(recv.n), recv.DType()
	return issue(ctx, h, callKey{op: "Broadcast", dt: dt, count: recv.n, root: root}, send, recv, s,
		func(sp, rp []cuda.DevicePtr, st []cuda.Stream) error {
			return c.Broadcast(ctx, sp, rp, n, dt, root, st)
		})
}

// Reduce reduces send with op over every rank into team rank root's recv
// (of send's length). Only the root's recv is written.
func Reduce[T Type](ctx context.Context, h Handle, send, recv *Buffer[T], op Op, root int, s *Streams) error {
	c, _ := h.parts()
	if err := sameLen(c, "Reduce", send, recv, 1); err != nil {
		return err
	}
	n, dt := uint64(recv.n), recv.DType()
	return issue(ctx, h, callKey{op: "Reduce", dt: dt, count: recv.n, redop: op, root: root}, send, recv, s,
		func(sp, rp []cuda.DevicePtr, st []cuda.Stream) error {
			return c.Reduce(ctx, sp, rp, n, dt, op, root, st)
		})
}

// ReduceScatter reduces send (Size x recv.Len() elements) with op over
// every rank and leaves slice r of the result in rank r's recv. In place,
// recv is rank r's slice of send (send.Slice(r*n, (r+1)*n)).
func ReduceScatter[T Type](ctx context.Context, h Handle, send, recv *Buffer[T], op Op, s *Streams) error {
	c, _ := h.parts()
	if err := sameLen(c, "ReduceScatter", send, recv, c.size); err != nil {
		return err
	}
	n, dt := uint64(recv.n), recv.DType()
	return issue(ctx, h, callKey{op: "ReduceScatter", dt: dt, count: recv.n, redop: op}, send, recv, s,
		func(sp, rp []cuda.DevicePtr, st []cuda.Stream) error {
			return c.ReduceScatter(ctx, sp, rp, n, dt, op, st)
		})
}

// AllGather gathers every rank's send into every rank's recv (Size x
// send.Len() elements), rank r's at slice r. In place, send is rank r's
// slice of recv.
func AllGather[T Type](ctx context.Context, h Handle, send, recv *Buffer[T], s *Streams) error {
	c, _ := h.parts()
	if err := sameLen(c, "AllGather", recv, send, c.size); err != nil {
		return err
	}
	n, dt := uint64(send.n), send.DType()
	return issue(ctx, h, callKey{op: "AllGather", dt: dt, count: send.n}, send, recv, s,
		func(sp, rp []cuda.DevicePtr, st []cuda.Stream) error { return c.AllGather(ctx, sp, rp, n, dt, st) })
}

// Barrier enqueues a device-side barrier on every local rank's stream of
// s: work after it starts once every rank has reached it.
func Barrier(ctx context.Context, h Handle, s *Streams) error {
	c, _ := h.parts()
	return issue[float32](ctx, h, callKey{op: "Barrier"}, nil, nil, s,
		func(_, _ []cuda.DevicePtr, st []cuda.Stream) error { return c.Barrier(ctx, st) })
}

// Wait waits, up to the Comm's deadline and ctx's, for the work on s and
// reports the kernels' failures (Comm.Sync).
func Wait(ctx context.Context, h Handle, s *Streams) error {
	c, _ := h.parts()
	return issue[float32](ctx, h, callKey{op: "Wait"}, nil, nil, s,
		func(_, _ []cuda.DevicePtr, st []cuda.Stream) error { return c.Sync(ctx, st) })
}

// issue runs call with every local rank's pointers and streams: at once
// for a *Comm, once every local rank's part has come for a *Rank (meet).
// send and recv are nil for the calls without buffers.
func issue[T Type](ctx context.Context, h Handle, k callKey, send, recv *Buffer[T], s *Streams,
	call func(send, recv []cuda.DevicePtr, streams []cuda.Stream) error) error {
	c, l := h.parts()
	if l < 0 {
		var sp, rp []cuda.DevicePtr
		if send != nil {
			sp, rp = send.ptrs, recv.ptrs
		}
		return call(sp, rp, s.list(c))
	}
	var sp, rp cuda.DevicePtr
	if send != nil {
		sp, rp = send.ptrs[l], recv.ptrs[l]
	}
	return c.meet(ctx, l, k, sp, rp, s.Stream(l), call)
}

// sameLen checks that big holds factor times small's elements, both
// buffers present and of c's team.
func sameLen[T Type](c *Comm, op string, big, small *Buffer[T], factor int) error {
	if big == nil || small == nil {
		return &ArgError{Op: op, Arg: "buffer", Rank: -1, Msg: "a nil *Buffer"}
	}
	if big.t != c.t || small.t != c.t {
		return &ArgError{Op: op, Arg: "buffer", Rank: -1, Msg: "a buffer of another team than the Comm's"}
	}
	if big.n != factor*small.n {
		what := "the same length"
		if factor > 1 {
			what = fmt.Sprintf("%d (ranks) times the length", factor)
		}
		return &ArgError{Op: op, Arg: "buffer", Rank: -1,
			Msg: fmt.Sprintf("buffers of %d and %d %v elements: want %s", big.n, small.n, big.DType(), what)}
	}
	return nil
}
