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
	switch op.coll {
	case collAllReduce:
		return l.comm.AllReduce(ctx, send, recv, op.count, op.dtype, op.op, l.streams)
	case collBroadcast:
		return l.comm.Broadcast(ctx, send, recv, op.count, op.dtype, op.root, l.streams)
	default:
		return l.comm.Barrier(ctx, l.streams)
	}
}

// Close unloads the kernels and frees the staging areas (before the team
// is closed: oursRunner.Close closes the launcher first).
func (l *libraryCollectives) Close() error { return l.comm.Close() }
