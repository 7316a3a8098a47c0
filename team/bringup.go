package team

import (
	"context"
	"fmt"
	"log/slog"
	"sync/atomic"
	"time"

	"github.com/nvls-go/nvls/cuda"
	"github.com/nvls-go/nvls/internal/kabi"
	"github.com/nvls-go/nvls/internal/posixfd"
	"github.com/nvls-go/nvls/multicast"
	"github.com/nvls-go/nvls/vmm"
)

// The bring-up, one step a line, as NCCL's src/transport/nvls.cc reads.
// Every local rank runs every step on its worker; after each step the
// ranks exchange their outcomes (and what the step sends), so that when
// one rank fails every rank stops at the same step. docs/bringup.md walks
// through it.
var steps = []step{
	{name: stepQuery, do: queryDevice, then: chooseTransport},
	{name: stepPeers, do: checkPeerAccess, then: agreePeerAccess},
	{name: stepMCGran, multicast: true, do: queryMulticastGranularity, then: sizeForMulticast},
	{name: stepMCCreate, multicast: true, do: createMulticast},
	{name: stepMCShare, multicast: true, takesFDs: true, do: shareMulticast},
	{name: stepMCAdd, multicast: true, do: addDevice, then: confirmAllAdded},
	{name: stepMemCreate, do: createWorkspace},
	{name: stepMCBind, multicast: true, do: bindWorkspace},
	{name: stepMCMap, multicast: true, do: mapMulticast},
	{name: stepMapOwn, do: mapWorkspace},
	{name: stepZero, do: zeroSignals},
	{name: stepShareMem, do: shareWorkspace, then: peerHandles},
	{name: stepImportMem, acrossProcesses: true, takesFDs: true, do: importWorkspaces},
	{name: stepMapPeers, do: mapPeerWorkspaces},
}

// Steps, as error messages and log lines name them; the last few are not
// lines of the table.
const (
	stepQuery     = "query device"
	stepPeers     = "check peer access"
	stepMCGran    = "query multicast granularity"
	stepMCCreate  = "create multicast object"
	stepMCShare   = "share multicast object"
	stepMCAdd     = "add device to multicast object"
	stepMemCreate = "create workspace memory"
	stepMCBind    = "bind multicast memory"
	stepMCMap     = "map multicast object"
	stepMapOwn    = "map workspace"
	stepZero      = "zero signal area"
	stepShareMem  = "share workspace handles"
	stepImportMem = "import peer workspaces"
	stepMapPeers  = "map peer workspaces"

	stepStart       = "start"
	stepWorkerStart = "start device worker"
	stepMCUnwind    = "undo multicast for the unicast fallback"
	stepTeardown    = "teardown"
)

// step is one line of the bring-up.
type step struct {
	name string
	// multicast: only on a multicast team; a fabric error in it makes a
	// team whose transport was chosen automatically fall back to unicast.
	multicast bool
	// acrossProcesses: only where handles travel as file descriptors
	// (NewRank over a bootstrap that is not InProcess).
	acrossProcesses bool
	// takesFDs: across processes, every rank first passes every rank the
	// FD the step before exported (bringup.sendFD), in bringup.fds; they
	// are closed once do returns.
	takesFDs bool
	// do is the rank's own part. It may set what the rank sends
	// (bringup.send, bringup.sendFD); the runner names the step, the rank
	// and the device in its error.
	do func(*bringup) error
	// then reads every rank's message (bringup.recv) after the exchange,
	// the same on every rank: its error is the team's verdict, as is.
	then func(*bringup) error
}

// rank is one local rank: its device, worker and bootstrap, what it holds
// and the stack of undos that gives it back.
type rank struct {
	rank    int // in the team
	dev     cuda.Device
	w       *worker
	tick    uint64 // Run's ticket for the job in flight on w
	primary cuda.Context
	boot    Bootstrap
	d       cuda.Driver
	log     *slog.Logger

	own     *vmm.Allocation // the workspace memory
	mc      *multicast.Object
	mcBound bool
	mcBase  cuda.DevicePtr
	ucBase  [kabi.MaxRanks]cuda.DevicePtr

	undos []undo
}

// agreement is what every rank of a team agreed on.
type agreement struct {
	size      int
	transport Transport
	reason    string
	handles   cuda.HandleType
	smCount   int
	// layout is every rank's workspace: signal + data + padding up to
	// the granularity (allocation, and multicast).
	layout kabi.Layout
	// fallback is the multicast failure that made an auto team fall back
	// to unicast, nil when none did.
	fallback *FabricError
	// onDevice is, per rank, how many ranks run on its device.
	onDevice []int
}

// bringup is one rank's way through the steps, on the rank's worker.
type bringup struct {
	ctx context.Context
	cfg resolved
	r   *rank
	// byValue: every rank is a rank of this one Team (New), so handles
	// travel by value and Close orders the teardown across ranks. Ranks
	// brought up one by one (NewRank) close independently, even in one
	// process: they export and import POSIX FDs, each holding its own
	// reference.
	byValue bool
	// logFallback: this rank writes the fallback's WARN line (one local
	// rank per process).
	logFallback bool
	// holders counts the local ranks attached to rank 0's multicast object
	// (byValue), which rank 0 releases only once none is.
	holders *atomic.Int32

	step  step // the step running
	level int  // its index in steps, from 1

	facts  []facts // every rank's, from the first step
	dec    decision
	agreed agreement

	send    []byte   // this rank's message in the step's exchange
	sendFD  int      // an FD for the next step to pass (-1: none)
	recv    [][]byte // every rank's message in the last exchange
	fds     []int    // the FDs passed for this step
	handles []cuda.MemHandle
}

// run takes this rank through the steps. On error the rank's stack holds
// whatever was acquired, for the caller's teardown.
func (b *bringup) run() error {
	b.sendFD = -1
	defer func() { closeFDs(append(b.fds, b.sendFD)) }()
	for i, s := range steps {
		switch {
		case s.multicast && b.agreed.transport != Multicast:
			continue
		case s.acrossProcesses && b.byValue:
			continue
		}
		b.step, b.level = s, i+1
		if err := b.runStep(); err != nil {
			return err
		}
	}
	return nil
}

// runStep runs the step on this rank, then the exchange and, when every
// rank succeeded, what follows from every rank's message. A multicast step
// that met a transient fabric error is run again by every rank in
// lockstep, while WithFabricRetry's budget lasts (retryStep).
func (b *bringup) runStep() error {
	s := b.step
	b.send = nil
	err := b.passFDs()
	defer func() {
		closeFDs(b.fds)
		b.fds = nil
	}()
	if err == nil {
		err = s.do(b)
	}
	var rt retries
	for {
		if err != nil {
			err = b.stepError(err, rt.done)
		}
		recv, fabric, xerr := exchange(b.ctx, b.r.boot, s.name, err, b.send, s.multicast && b.dec.auto, s.multicast && b.canRetry(&rt))
		switch {
		case xerr != nil:
			return xerr
		case fabric != nil && fabric.retry:
			err = b.retryStep(&rt, fabric, err)
			continue
		case fabric != nil:
			return b.fallBack(fabric)
		}
		b.recv = recv
		break
	}
	if rt.done > 0 && b.logFallback {
		b.r.log.Warn("team: "+s.name+": passed after retries", "retries", rt.done, "waited", time.Since(rt.first).Round(time.Millisecond).String())
	}
	if s.then != nil {
		if err := s.then(b); err != nil {
			return err
		}
	}
	b.r.log.Info("team: "+s.name, b.logArgs()...)
	return nil
}

// retries counts a step's retries and when the first began.
type retries struct {
	done  int
	first time.Time
}

// retryPause is the pause before the first retry; it doubles up to
// retryPauseMax.
const (
	retryPause    = 100 * time.Millisecond
	retryPauseMax = 2 * time.Second
)

// canRetry: this rank may still ask for a retry of the step.
func (b *bringup) canRetry(rt *retries) bool {
	if rt.done >= b.cfg.retries {
		return false
	}
	return rt.first.IsZero() || time.Since(rt.first) < b.cfg.retryWithin
}

// retryStep runs the step again after the ranks voted for it (cause: the
// lowest rank that asked), on every rank in lockstep: a rank whose part
// failed (local) does it again, the others send their message again.
// The pause before it doubles with each retry.
func (b *bringup) retryStep(rt *retries, cause *FabricError, local error) error {
	if rt.first.IsZero() {
		rt.first = time.Now()
	}
	rt.done++
	pause := min(retryPause<<(rt.done-1), retryPauseMax, max(b.cfg.retryWithin-time.Since(rt.first), 0))
	if b.logFallback {
		b.r.log.Warn("team: multicast step failed with a transient fabric error; every rank retries it",
			"step", cause.Step, "rank", cause.Rank, "device", int(cause.Device), "cause", cause.DriverCall(),
			"failed_ranks", fmt.Sprint(cause.failed), "retry", rt.done, "of", b.cfg.retries, "pause", pause.String())
	}
	t := time.NewTimer(pause)
	select {
	case <-t.C:
	case <-b.ctx.Done():
		// The next exchange ends with the context's error.
	}
	t.Stop()
	if local == nil {
		return nil
	}
	b.send = nil
	return b.step.do(b)
}

// passFDs: for a step that takes FDs, across processes, every rank passes
// the FD the step before exported to every rank.
func (b *bringup) passFDs() error {
	if !b.step.takesFDs || b.byValue {
		return nil
	}
	fds, err := b.r.boot.AllGatherFDs(b.ctx, b.sendFD)
	closeFD(b.sendFD)
	b.sendFD, b.fds = -1, fds
	return err
}

// logArgs are the attributes of the step's INFO line.
func (b *bringup) logArgs() []any {
	r, a := b.r, b.agreed
	args := []any{"rank", r.rank, "device", int(r.dev)}
	switch b.step.name {
	case stepQuery:
		args = append(args, "ranks", a.size, "transport", a.transport.String(), "reason", a.reason)
	case stepMCCreate:
		args = append(args, "bytes", a.layout.Size(), "devices", a.size)
	case stepMapPeers:
		args = append(args, "peers", a.size-1)
	case stepMCGran, stepMemCreate:
		args = append(args, "workspace_bytes", a.layout.Size(), "granularity", a.layout.Gran)
	case stepMCMap:
		args = append(args, "mc_base", hex(r.mcBase))
	case stepMapOwn:
		args = append(args, "uc_base", hex(r.ucBase[r.rank]))
	}
	return args
}

// fail names the step, the rank and the device in err.
func (b *bringup) fail(step string, err error) error {
	return wrap(err, "team: rank %d (device %d): %s", b.r.rank, b.r.dev, step)
}

// agree is an exchange of this rank's outcome alone.
func (b *bringup) agree(step string, local error) error {
	_, _, err := exchange(b.ctx, b.r.boot, step, local, nil, false, false)
	return err
}

// push puts the undo of what the running step acquired on the rank's stack.
func (b *bringup) push(what string, fn func() error) {
	b.r.push(undo{level: b.level, multicast: b.step.multicast, what: what, fn: fn})
}

// closeFD closes fd, if it is one (>= 0).
func closeFD(fd int) {
	if fd >= 0 {
		_ = posixfd.Close(fd)
	}
}

func closeFDs(fds []int) {
	for _, fd := range fds {
		closeFD(fd)
	}
}
