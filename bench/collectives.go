package main

import (
	"context"

	"github.com/nvls-go/nvls/collectives"
	"github.com/nvls-go/nvls/cuda"
	"github.com/nvls-go/nvls/team"
)

// libraryCollectives runs the sweep's collectives with package
// collectives on the node's streams.
type libraryCollectives struct {
	comm    *collectives.Comm
	streams []cuda.Stream
}

// newLibraryCollectives wires package collectives into the sweep.
func newLibraryCollectives(tm *team.Team, n *node, cfg *config) (collectiveLauncher, error) {
	comm, err := collectives.New(tm)
	if err != nil {
		return nil, err
	}
	return &libraryCollectives{comm: comm, streams: n.streams}, nil
}

func (l *libraryCollectives) launch(ctx context.Context, op opSpec, send, recv []cuda.DevicePtr) error {
	return op.coll.nvls(ctx, l.comm, op, send, recv, l.streams)
}

// wait is Comm.Sync on the node's streams: what a program that waits for
// each collective calls (-z 1).
func (l *libraryCollectives) wait(ctx context.Context) error { return l.comm.Sync(ctx, l.streams) }

// settings is what the Comm runs with (the header's "# nvls:" line).
func (l *libraryCollectives) settings() collectives.Settings { return l.comm.Settings() }

// Close unloads the kernels and frees the staging areas (before the team
// is closed: oursRunner.Close closes the launcher first).
func (l *libraryCollectives) Close() error { return l.comm.Close() }

// The table's nvls entries (colls.go).

func allReduceNVLS(ctx context.Context, c *collectives.Comm, op opSpec, send, recv []cuda.DevicePtr, streams []cuda.Stream) error {
	return c.AllReduce(ctx, send, recv, op.count, op.dtype, op.op, streams)
}

func broadcastNVLS(ctx context.Context, c *collectives.Comm, op opSpec, send, recv []cuda.DevicePtr, streams []cuda.Stream) error {
	return c.Broadcast(ctx, send, recv, op.count, op.dtype, op.root, streams)
}

func barrierNVLS(ctx context.Context, c *collectives.Comm, _ opSpec, _, _ []cuda.DevicePtr, streams []cuda.Stream) error {
	return c.Barrier(ctx, streams)
}

func reduceScatterNVLS(ctx context.Context, c *collectives.Comm, op opSpec, send, recv []cuda.DevicePtr, streams []cuda.Stream) error {
	return c.ReduceScatter(ctx, send, recv, op.count, op.dtype, op.op, streams)
}

func allGatherNVLS(ctx context.Context, c *collectives.Comm, op opSpec, send, recv []cuda.DevicePtr, streams []cuda.Stream) error {
	return c.AllGather(ctx, send, recv, op.count, op.dtype, streams)
}

func reduceNVLS(ctx context.Context, c *collectives.Comm, op opSpec, send, recv []cuda.DevicePtr, streams []cuda.Stream) error {
	return c.Reduce(ctx, send, recv, op.count, op.dtype, op.op, op.root, streams)
}
