package team

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync/atomic"

	"github.com/nvls-go/nvls/cuda"
	"github.com/nvls-go/nvls/cuda/trace"
	"github.com/nvls-go/nvls/internal/deadline"
	"github.com/nvls-go/nvls/internal/kabi"
)

// New brings up a team over devices, rank i on devices[i] (a device may
// repeat only with WithSharedDevices), all driven by this process: each
// rank's bring-up runs on its own worker, and the ranks meet through an
// in-process Bootstrap. On failure everything done is undone and the
// error names the step, the rank and the device. New returns by ctx's
// deadline or the setup timeout even when a rank hangs inside a driver
// call, naming it (ErrPeerMissing); what it holds is released once its
// call returns.
func New(ctx context.Context, d cuda.Driver, devices []cuda.Device, opts ...Option) (*Team, error) {
	cfg, err := checkNew(d, devices, opts)
	if err != nil {
		return nil, err
	}
	setupCtx, cancel := deadline.WithTimeout(ctx, cfg.setupTimeout, setupDeadline, cfg.setupTimeoutSrc)
	defer cancel()
	drv := wrapDriver(d, cfg.logger)
	if err := drv.Init(); err != nil {
		return nil, fmt.Errorf("team: %s: %w", stepStart, err)
	}
	t := &Team{d: drv, log: cfg.logger, boots: NewInProcess(len(devices)), setupTimeout: cfg.setupTimeout, setupTimeoutSrc: cfg.setupTimeoutSrc}
	for i, dev := range devices {
		if err := t.startRank(cfg, dev, t.boots[i], i, len(devices)); err != nil {
			return nil, errors.Join(err, t.teardown(t.ranks, true))
		}
	}
	bringups, errs, done := t.bringUp(setupCtx, cfg)
	if hung := waitRanks(setupCtx, done, errs, hungGrace); len(hung) > 0 {
		return nil, t.abandon(setupCtx, hung, errs, done, cfg.setupTimeout)
	}
	return t.finish(bringups[0].agreed, deadline.Explain(setupCtx, rootCause(errs)))
}

// setupDeadline is what the errors call the bring-up's deadline.
const setupDeadline = "setup deadline"

// checkNew checks New's arguments and reads the options.
func checkNew(d cuda.Driver, devices []cuda.Device, opts []Option) (resolved, error) {
	if d == nil {
		return resolved{}, nilDriver("New")
	}
	if len(devices) == 0 || len(devices) > kabi.MaxRanks {
		return resolved{}, fmt.Errorf("%w: %d devices (1 to %d)", ErrBadDevices, len(devices), kabi.MaxRanks)
	}
	cfg, err := resolve(opts)
	if err != nil || cfg.sharedDevices {
		return cfg, err
	}
	for i, dev := range devices {
		if j := slices.Index(devices[:i], dev); j >= 0 {
			return cfg, fmt.Errorf("%w: device %d given twice (ranks %d and %d); to run several ranks on one GPU (development and testing), pass WithSharedDevices", ErrBadDevices, dev, j, i)
		}
	}
	return cfg, nil
}

func nilDriver(fn string) error {
	return fmt.Errorf("%w: %s needs the driver cuda.Open returns, or a simulated node (cuda/sim)", ErrNilDriver, fn)
}

// startRank starts the worker of a local rank (the first thing on its
// stack) and adds the rank to the team.
func (t *Team) startRank(cfg resolved, dev cuda.Device, boot Bootstrap, local, numLocal int) error {
	w, err := startWorker(t.d, dev, local, workerSpin(numLocal, cfg.workerSpin))
	if err != nil {
		return fmt.Errorf("team: rank %d (device %d): %s: %w", boot.Rank(), dev, stepWorkerStart, err)
	}
	r := &rank{rank: boot.Rank(), dev: dev, w: w, primary: w.primary, boot: boot, d: t.d, log: cfg.logger}
	r.pushWorker()
	t.ranks = append(t.ranks, r)
	return nil
}

// bringUp starts every local rank's bring-up on its worker, each from a
// goroutine of its own (they meet in the exchanges). A rank sends its
// index on done once errs[index] is set.
func (t *Team) bringUp(ctx context.Context, cfg resolved) ([]*bringup, []error, <-chan int) {
	n := len(t.ranks)
	bringups, errs, done := make([]*bringup, n), make([]error, n), make(chan int, n)
	holders := new(atomic.Int32)
	for i, r := range t.ranks {
		bringups[i] = &bringup{ctx: ctx, cfg: cfg, r: r, byValue: true, logFallback: i == 0, holders: holders}
		go func() {
			errs[i] = r.w.do(bringups[i].run)
			if errs[i] != nil {
				// A rank that stopped outside an exchange must not keep
				// the others waiting for it until the deadline.
				_ = r.boot.Close()
			}
			done <- i
		}()
	}
	return bringups, errs, done
}

// finish ends a bring-up whose ranks all returned: the ready team, or
// err once everything was given back.
func (t *Team) finish(agreed agreement, err error) (*Team, error) {
	if err != nil {
		return nil, errors.Join(err, t.teardown(t.ranks, true))
	}
	t.agreed = agreed
	t.alloc = newAllocator(agreed.layout.Data)
	t.logReady()
	return t, nil
}

// NewRank brings up this process's one rank of a team whose ranks meet
// through boot (one process per GPU under mpirun, with team/mpi's
// bootstrap, say). Every rank calls it at the same time with its own
// device; the Team has one local rank, and boot stays the caller's. ctx
// bounds the exchanges, and so does the setup timeout where an option or
// NVLS_SETUP_TIMEOUT gives one. Across processes (a bootstrap that is not
// InProcess), handles travel as POSIX FDs (Bootstrap.AllGatherFDs).
func NewRank(ctx context.Context, d cuda.Driver, dev cuda.Device, boot Bootstrap, opts ...Option) (*Team, error) {
	if boot == nil {
		return nil, errors.New("team: NewRank: nil Bootstrap")
	}
	cfg, err := resolve(opts)
	if err == nil && d == nil {
		err = nilDriver("NewRank")
	}
	if err != nil {
		return nil, failEarly(ctx, boot, wrap(err, "team: rank %d (device %d)", boot.Rank(), dev))
	}
	if cfg.setupTimeoutSet {
		var cancel context.CancelFunc
		ctx, cancel = deadline.WithTimeout(ctx, cfg.setupTimeout, setupDeadline, cfg.setupTimeoutSrc)
		defer cancel()
	}
	t := &Team{d: wrapDriver(d, cfg.logger), log: cfg.logger}
	if cfg.setupTimeoutSet {
		t.setupTimeout, t.setupTimeoutSrc = cfg.setupTimeout, cfg.setupTimeoutSrc
	}
	if err := t.d.Init(); err != nil {
		return nil, deadline.Explain(ctx, failEarly(ctx, boot, fmt.Errorf("team: rank %d (device %d): %s: %w", boot.Rank(), dev, stepStart, err)))
	}
	if err := t.startRank(cfg, dev, boot, 0, 1); err != nil {
		return nil, deadline.Explain(ctx, failEarly(ctx, boot, err))
	}
	b := &bringup{ctx: ctx, cfg: cfg, r: t.ranks[0], logFallback: true}
	err = t.ranks[0].w.do(b.run)
	return t.finish(b.agreed, deadline.Explain(ctx, err))
}

// wrapDriver adds the tracing decorator when the logger shows TRACE.
func wrapDriver(d cuda.Driver, l *slog.Logger) cuda.Driver {
	if l.Enabled(context.Background(), LevelTrace) {
		return trace.New(d, l)
	}
	return d
}

// rootCause picks the error to return from the ranks' errors: the first
// that is a rank's own failure rather than the echo of another's (a
// PeerError, or a bootstrap closed by a rank that stopped).
func rootCause(errs []error) error {
	var echo error
	for _, err := range errs {
		if err == nil {
			continue
		}
		var pe *PeerError
		if errors.As(err, &pe) || errors.Is(err, ErrBootstrapClosed) {
			if echo == nil {
				echo = err
			}
			continue
		}
		return err
	}
	return echo
}

func (t *Team) logReady() {
	fp := t.Footprint()
	for _, r := range t.ranks {
		t.log.Info("team: ready", "rank", r.rank, "device", int(r.dev), "ranks", t.agreed.size,
			"transport", t.agreed.transport.String(), "reason", t.agreed.reason,
			"workspace", fp.Workspace, "data", fp.Data, "signal", fp.Signal, "padding", fp.Padding,
			"peer_va", fp.PeerVA, "multicast_va", fp.MulticastVA, "sm_count", t.agreed.smCount,
			"ranks_on_device", t.RanksOnDevice(r.rank))
	}
	if m := t.maxRanksOnDevice(); m > 1 {
		t.log.Warn("team: shared devices: several ranks run on one GPU (WithSharedDevices), for development and testing; they share its SMs and memory bandwidth, and their peer accesses are local: timings are not a node's",
			"ranks", t.agreed.size, "max_ranks_on_device", m, "transport", t.agreed.transport.String())
	}
}
