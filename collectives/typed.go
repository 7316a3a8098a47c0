package collectives

import (
	"context"
	"fmt"
)

// The typed collectives: NCCL's semantics on Buffers, whose element type
// and length give the dtype and count, enqueued on s (nil: the default
// streams) for every local rank at once. They check their buffers'
// lengths against each other and return; Sync waits. send == recv (the
// same *Buffer, or views of the same memory) runs in place. Every rank
// of the team makes the same calls in the same order (under mpirun, each
// process for its one local rank).

// AllReduce reduces send with op over every rank into every rank's recv
// (of send's length).
func AllReduce[T Type](ctx context.Context, c *Comm, send, recv *Buffer[T], op Op, s *Streams) error {
	if err := sameLen(c, "AllReduce", send, recv, 1); err != nil {
		return err
	}
	return c.AllReduce(ctx, send.ptrs, recv.ptrs, uint64(recv.n), recv.DType(), op, s.list(c))
}

// Broadcast copies team rank root's send into every rank's recv (of
// send's length). Only the root's send is read.
func Broadcast[T Type](ctx context.Context, c *Comm, send, recv *Buffer[T], root int, s *Streams) error {
	if err := sameLen(c, "Broadcast", send, recv, 1); err != nil {
		return err
	}
	return c.Broadcast(ctx, send.ptrs, recv.ptrs, uint64(recv.n), recv.DType(), root, s.list(c))
}

// Reduce reduces send with op over every rank into team rank root's recv
// (of send's length). Only the root's recv is written.
func Reduce[T Type](ctx context.Context, c *Comm, send, recv *Buffer[T], op Op, root int, s *Streams) error {
	if err := sameLen(c, "Reduce", send, recv, 1); err != nil {
		return err
	}
	return c.Reduce(ctx, send.ptrs, recv.ptrs, uint64(recv.n), recv.DType(), op, root, s.list(c))
}

// ReduceScatter reduces send (Size x recv.Len() elements) with op over
// every rank and leaves slice r of the result in rank r's recv. In place,
// recv is rank r's slice of send (send.Slice(r*n, (r+1)*n)).
func ReduceScatter[T Type](ctx context.Context, c *Comm, send, recv *Buffer[T], op Op, s *Streams) error {
	if err := sameLen(c, "ReduceScatter", send, recv, c.size); err != nil {
		return err
	}
	return c.ReduceScatter(ctx, send.ptrs, recv.ptrs, uint64(recv.n), recv.DType(), op, s.list(c))
}

// AllGather gathers every rank's send into every rank's recv (Size x
// send.Len() elements), rank r's at slice r. In place, send is rank r's
// slice of recv.
func AllGather[T Type](ctx context.Context, c *Comm, send, recv *Buffer[T], s *Streams) error {
	if err := sameLen(c, "AllGather", recv, send, c.size); err != nil {
		return err
	}
	return c.AllGather(ctx, send.ptrs, recv.ptrs, uint64(send.n), send.DType(), s.list(c))
}

// Barrier enqueues a device-side barrier on every local rank's stream of
// s: work after it starts once every rank has reached it.
func Barrier(ctx context.Context, c *Comm, s *Streams) error {
	return c.Barrier(ctx, s.list(c))
}

// Wait waits, up to the Comm's deadline and ctx's, for the work on s and
// reports the kernels' failures (Comm.Sync).
func Wait(ctx context.Context, c *Comm, s *Streams) error {
	return c.Sync(ctx, s.list(c))
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
