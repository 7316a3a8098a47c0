package main

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/nvls-go/nvls/bench/internal/cli"
	"github.com/nvls-go/nvls/collectives"
	"github.com/nvls-go/nvls/cuda"
	"github.com/nvls-go/nvls/team"
)

// oursRunner is nvls: a team over the node's GPUs, two symmetric buffers
// (send and recv) from its workspace, and the collectives on them.
type oursRunner struct {
	n          *node
	tm         *team.Team
	send, recv team.Buffer
	sendP      []cuda.DevicePtr
	recvP      []cuda.DevicePtr
	coll       collectiveLauncher
}

// collectiveLauncher issues one collective of the library under test on
// every rank's stream.
type collectiveLauncher interface {
	launch(ctx context.Context, op opSpec, send, recv []cuda.DevicePtr) error
	// wait returns once what was launched is done (package collectives:
	// Comm.Sync).
	wait(ctx context.Context) error
}

// workspaceFor is the data area a team of ranks ranks needs for two
// buffers of b bytes and what collectives.New takes from it (staging and
// LL areas, with the options the environment sets).
func workspaceFor(b uint64, ranks int) (uint64, error) {
	a := (b + team.Alignment - 1) / team.Alignment * team.Alignment
	c, err := collectives.WorkspaceBytes(ranks)
	if err != nil {
		return 0, err
	}
	return 2*a + c, nil
}

func newOursRunner(ctx context.Context, n *node, cfg *config, bufBytes uint64) (*oursRunner, error) {
	tr, err := team.ParseTransport(cfg.transport)
	if err != nil {
		return nil, fmt.Errorf("-transport %s: %w", cfg.transport, err)
	}
	ws, err := workspaceFor(bufBytes, n.ranks())
	if err != nil {
		return nil, err
	}
	opts := []team.Option{team.WithTransport(tr), team.WithWorkspaceSize(ws)}
	if n.shared() {
		opts = append(opts, team.WithSharedDevices())
	}
	tm, err := n.w.newTeam(ctx, n.drv, n.devs, opts...)
	if err != nil {
		return nil, fmt.Errorf("bringing up the team: %w", err)
	}
	o := &oursRunner{n: n, tm: tm}
	if o.send, err = tm.Alloc(bufBytes); err == nil {
		o.recv, err = tm.Alloc(bufBytes)
	}
	if err != nil {
		_ = tm.Close()
		return nil, fmt.Errorf("allocating %s buffers: %w", cli.FormatSize(bufBytes), err)
	}
	for r := range n.size() {
		o.sendP = append(o.sendP, o.send.Ptr(r))
		o.recvP = append(o.recvP, o.recv.Ptr(r))
	}
	if o.coll, err = newCollectives(tm, n, cfg); err != nil {
		_ = tm.Close()
		return nil, err
	}
	n.workers = func(fn func(r int) error) error { return tm.Run(team.JobFunc(fn)) }
	return o, nil
}

func (o *oursRunner) name() string     { return "nvls " + o.tm.Transport().String() }
func (o *oursRunner) kind() runnerKind { return kindNVLS }

func (o *oursRunner) transport() Transport {
	return Transport{Name: o.tm.Transport().String(), Reason: o.tm.Reason()}
}

// settings is what the library's Comm runs with; nil where the launcher
// is a test's double.
func (o *oursRunner) settings() *collectives.Settings {
	l, ok := o.coll.(interface{ settings() collectives.Settings })
	if !ok {
		return nil
	}
	s := l.settings()
	return &s
}

// buffers are the per-rank addresses of the send and recv buffers.
func (o *oursRunner) buffers() (send, recv []cuda.DevicePtr) { return o.sendP, o.recvP }

func (o *oursRunner) enqueue(ctx context.Context, op opSpec, send, recv []cuda.DevicePtr, k int) error {
	for range k {
		if err := o.coll.launch(ctx, op, send, recv); err != nil {
			return err
		}
	}
	return nil
}

func (o *oursRunner) wait(ctx context.Context) error { return o.coll.wait(ctx) }

// Close frees the buffers and tears the team down.
func (o *oursRunner) Close() error {
	var errs []error
	if c, ok := o.coll.(io.Closer); ok {
		errs = append(errs, c.Close())
	}
	o.n.workers = nil
	errs = append(errs, o.tm.Free(o.send), o.tm.Free(o.recv), o.tm.Close())
	return errors.Join(errs...)
}

// newCollectives makes the launcher of the library under test; tests
// replace it with a reference double.
var newCollectives = newLibraryCollectives
