package team

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"slices"
	"sync"
	"time"

	"github.com/nvls-go/nvls/cuda"
	"github.com/nvls-go/nvls/kernels"
	"github.com/nvls-go/nvls/multicast"
	"github.com/nvls-go/nvls/cuda/trace"
)

// ErrClosed: the team was closed.
var ErrClosed = errors.New("team: closed")

// ErrBroken matches Team.Err's error (and what later operations return)
// once Fail recorded a fatal error.
var ErrBroken = errors.New("team: broken")

// Team is a set of GPUs with a symmetric workspace: one per rank, the same
// size and layout on every rank, mapped on every rank's device (and, with
// the multicast transport, bound to one multicast object mapped on every
// device). A Team holds the ranks local to this process: all of them (New)
// or one (NewRank, one process per GPU).
type Team struct {
	d     cuda.Driver
	log   *slog.Logger
	sh    shared
	ranks []*rankState
	// boots are closed with the team when the team made them (New).
	boots []Bootstrap

	runMu  sync.Mutex // serializes Run and Close
	closed bool       // set under runMu and bootMu
	// bootMu serializes AllGather (and Close against it): a bootstrap's
	// collectives are called one at a time.
	bootMu sync.Mutex
	// setupTimeout bounds AllGather like the bring-up's exchanges: New's
	// (always set), NewRank's where given (0: ctx and the bootstrap's own
	// default).
	setupTimeout time.Duration

	mu    sync.Mutex // guards alloc and failed
	alloc *allocator
	fail  error
}

// New brings up a team over devices, one rank per device (rank i on
// devices[i]; a device may repeat only with WithSharedDevices), all
// driven by this process: each rank's bring-up runs on
// its own worker goroutine, locked to an OS thread with the device's
// primary context current, and the ranks meet through an in-process
// Bootstrap. On failure everything done is undone and the error names the
// step, the rank and the device.
//
// The bring-up is bounded by ctx and by the setup timeout
// (WithSetupTimeout, NVLS_SETUP_TIMEOUT, DefaultSetupTimeout): New returns
// by then even when a rank hangs inside a driver call, with an error that
// names the ranks that did not arrive (matching ErrPeerMissing and
// context.DeadlineExceeded). What the hung ranks hold is released in the
// background once their driver call returns.
func New(ctx context.Context, d cuda.Driver, devices []cuda.Device, opts ...Option) (*Team, error) {
	if len(devices) == 0 || len(devices) > kernels.MaxRanks {
		return nil, fmt.Errorf("%w: %d devices (1 to %d)", ErrBadDevices, len(devices), kernels.MaxRanks)
	}
	cfg, err := resolve(opts)
	if err != nil {
		return nil, err
	}
	if !cfg.shared {
		for i, dev := range devices {
			if j := slices.Index(devices[:i], dev); j >= 0 {
				return nil, fmt.Errorf("%w: device %d given twice (ranks %d and %d); to run several ranks on one GPU (development and testing), pass WithSharedDevices", ErrBadDevices, dev, j, i)
			}
		}
	}
	setupCtx, cancel := context.WithTimeout(ctx, cfg.setupTimeout)
	defer cancel()
	drv := wrapDriver(d, cfg.logger)
	if err := drv.Init(); err != nil {
		return nil, fmt.Errorf("team: %s: cuInit: %w", stepStart, err)
	}
	n := len(devices)
	ranks := make([]*rankState, n)
	boots := NewInProcess(n)
	for i, dev := range devices {
		w, err := startWorker(drv, dev, i, workerSpin(n, cfg.workerSpin))
		if err != nil {
			err = fmt.Errorf("team: rank %d (device %d): %s: %w", i, dev, stepWorkerStart, err)
			for _, r := range ranks[:i] {
				if serr := r.w.stop(); serr != nil {
					err = errors.Join(err, fmt.Errorf("team: rank %d (device %d): stop worker: %w", r.rank, r.dev, serr))
				}
			}
			return nil, err
		}
		ranks[i] = &rankState{rank: i, dev: dev, w: w, cctx: w.cctx, boot: boots[i], d: drv, log: cfg.logger}
	}
	bus := make([]*bringup, n)
	errs := make([]error, n)
	done := make(chan int, n)
	for i, r := range ranks {
		bus[i] = &bringup{ctx: setupCtx, cfg: cfg, r: r, logFallback: i == 0, byValue: true}
		go func() {
			errs[i] = r.w.do(bus[i].run)
			if errs[i] != nil {
				// A rank that stopped outside an exchange must not keep
				// the others waiting for it until the deadline.
				_ = boots[i].Close()
			}
			done <- i
		}()
	}
	hung := waitRanks(setupCtx, done, errs, hungGrace)
	t := &Team{d: drv, log: cfg.logger, ranks: ranks, boots: boots, setupTimeout: cfg.setupTimeout}
	if len(hung) > 0 {
		return nil, t.abandon(setupCtx, hung, errs, done, cfg.setupTimeout)
	}
	t.sh = bus[0].sh
	if err := rootCause(errs); err != nil {
		if cerr := t.teardown(); cerr != nil {
			err = errors.Join(err, cerr)
		}
		return nil, err
	}
	t.alloc = newAllocator(t.sh.dataBytes)
	t.logReady()
	return t, nil
}

// hungGrace bounds how long New waits, once the setup deadline passed,
// for ranks that no other rank names as missing.
const hungGrace = 200 * time.Millisecond

// waitRanks waits for the n ranks' bring-ups (each sends its index on
// done once errs[index] is set) until ctx ends. After that it waits, at
// most grace more, for the ranks that the returned errors do not name as
// missing: a rank waiting in an exchange returns at once (the deadline
// broke it), a rank inside a driver call does not. It returns the ranks
// that had not returned, in order.
func waitRanks(ctx context.Context, done <-chan int, errs []error, grace time.Duration) []int {
	n := len(errs)
	returned := make([]bool, n)
	left := n
	for left > 0 {
		select {
		case i := <-done:
			returned[i] = true
			left--
			continue
		case <-ctx.Done():
		}
		break
	}
	if left > 0 {
		timer := time.NewTimer(grace)
		defer timer.Stop()
	wait:
		for left > 0 && !onlyMissingLeft(returned, errs) {
			select {
			case i := <-done:
				returned[i] = true
				left--
			case <-timer.C:
				break wait
			}
		}
	}
	var hung []int
	for i, ok := range returned {
		if !ok {
			hung = append(hung, i)
		}
	}
	return hung
}

// onlyMissingLeft reports whether every rank that has not returned is
// named missing by a returned rank's error.
func onlyMissingLeft(returned []bool, errs []error) bool {
	missing := map[int]bool{}
	for i, ok := range returned {
		var mr *MissingRanksError
		if ok && errors.As(errs[i], &mr) {
			for _, m := range mr.Missing {
				missing[m] = true
			}
		}
	}
	for i, ok := range returned {
		if !ok && !missing[i] {
			return false
		}
	}
	return true
}

// abandon ends a bring-up some ranks of which are hung in a driver call
// past the deadline: it tears down what the other ranks hold now, leaves
// the rest (and the hung ranks' workers) to a goroutine that waits for
// the hung ranks to return, and returns New's error.
func (t *Team) abandon(ctx context.Context, hung []int, errs []error, done <-chan int, timeout time.Duration) error {
	var live []*rankState
	var liveErrs []error
	var devs []int
	for i, r := range t.ranks {
		if slices.Contains(hung, i) {
			devs = append(devs, int(r.dev))
			continue
		}
		live = append(live, r)
		liveErrs = append(liveErrs, errs[i])
	}
	err := fmt.Errorf("team: rank(s) %v (device(s) %v) still inside a driver call when the setup ended (timeout %v); what they hold is released when the call returns: %w",
		hung, devs, timeout, errors.Join(ErrPeerMissing, context.Cause(ctx)))
	if first := rootCause(liveErrs); first != nil {
		err = errors.Join(first, err)
	}
	if cerr := t.teardownRanks(live, false); cerr != nil {
		err = errors.Join(err, cerr)
	}
	go func() {
		for range hung {
			<-done
		}
		if cerr := t.teardown(); cerr != nil {
			t.log.Error("team: teardown after the hung ranks returned", "ranks", fmt.Sprint(hung), "err", cerr)
		}
	}()
	return err
}

// NewRank brings up this process's one rank of a team whose ranks meet
// through boot (for example one process per GPU under mpirun, with the
// MPI bootstrap of team/mpi). Every rank calls it at the same time with
// its own device. The returned Team has one local rank. boot stays the
// caller's: Close does not close it.
//
// ctx bounds the bring-up's exchanges, and so does the setup timeout
// where WithSetupTimeout or NVLS_SETUP_TIMEOUT gives one (otherwise the
// bootstrap's own default applies). NewRank waits for its own rank's
// driver calls.
//
// With a bootstrap that is not InProcess, allocations and the multicast
// object travel between processes as POSIX file descriptors
// (Bootstrap.AllGatherFDs).
func NewRank(ctx context.Context, d cuda.Driver, dev cuda.Device, boot Bootstrap, opts ...Option) (*Team, error) {
	if boot == nil {
		return nil, errors.New("team: NewRank: nil Bootstrap")
	}
	cfg, err := resolve(opts)
	if err != nil {
		return nil, failEarly(ctx, boot, fmt.Errorf("team: rank %d (device %d): %w", boot.Rank(), dev, err))
	}
	if cfg.setupTimeoutSet {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, cfg.setupTimeout)
		defer cancel()
	}
	drv := wrapDriver(d, cfg.logger)
	if err := drv.Init(); err != nil {
		return nil, failEarly(ctx, boot, fmt.Errorf("team: rank %d (device %d): %s: cuInit: %w", boot.Rank(), dev, stepStart, err))
	}
	w, err := startWorker(drv, dev, 0, workerSpin(1, cfg.workerSpin))
	if err != nil {
		return nil, failEarly(ctx, boot, fmt.Errorf("team: rank %d (device %d): %s: %w", boot.Rank(), dev, stepWorkerStart, err))
	}
	r := &rankState{rank: boot.Rank(), dev: dev, w: w, cctx: w.cctx, boot: boot, d: drv, log: cfg.logger}
	bu := &bringup{ctx: ctx, cfg: cfg, r: r, logFallback: true}
	err = w.do(bu.run)
	t := &Team{d: drv, log: cfg.logger, sh: bu.sh, ranks: []*rankState{r}}
	if cfg.setupTimeoutSet {
		t.setupTimeout = cfg.setupTimeout
	}
	if err != nil {
		if cerr := t.teardown(); cerr != nil {
			err = errors.Join(err, cerr)
		}
		return nil, err
	}
	t.alloc = newAllocator(t.sh.dataBytes)
	t.logReady()
	return t, nil
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
		t.log.Info("team: ready", "rank", r.rank, "device", int(r.dev), "ranks", t.sh.size,
			"transport", t.sh.transport.String(), "reason", t.sh.reason,
			"workspace", fp.Workspace, "data", fp.Data, "signal", fp.Signal, "padding", fp.Padding,
			"peer_va", fp.PeerVA, "multicast_va", fp.MulticastVA, "sm_count", t.sh.smCount,
			"ranks_on_device", t.RanksOnDevice(r.rank))
	}
	if m := t.MaxRanksOnDevice(); m > 1 {
		t.log.Warn("team: shared devices: several ranks run on one GPU (WithSharedDevices), for development and testing; they share its SMs and memory bandwidth, and their peer accesses are local: timings are not a node's",
			"ranks", t.sh.size, "max_ranks_on_device", m, "transport", t.sh.transport.String())
	}
}

// Size is the number of ranks in the team (all processes).
func (t *Team) Size() int { return t.sh.size }

// NumLocal is the number of ranks driven by this process.
func (t *Team) NumLocal() int { return len(t.ranks) }

// Rank is the team rank of local rank localRank.
func (t *Team) Rank(localRank int) int { return t.ranks[localRank].rank }

// Device is local rank localRank's device.
func (t *Team) Device(localRank int) cuda.Device { return t.ranks[localRank].dev }

// Context is local rank localRank's device's primary context (current on
// its worker).
func (t *Team) Context(localRank int) cuda.Context { return t.ranks[localRank].cctx }

// UCBases are the bases of every rank's workspace as local rank
// localRank's device sees them: entry r is rank r's workspace (its own
// through its UC alias, the others through the peer mappings); entries
// from Size() on are 0.
func (t *Team) UCBases(localRank int) [kernels.MaxRanks]cuda.DevicePtr {
	return t.ranks[localRank].ucBase
}

// MCBase is the base of the multicast alias on local rank localRank's
// device, or 0 with the unicast transport.
func (t *Team) MCBase(localRank int) cuda.DevicePtr { return t.ranks[localRank].mcBase }

// WorkspaceSize is the size of each rank's workspace allocation: the
// signal area (kernels.SignalBytes), the data area and the granularity
// padding.
func (t *Team) WorkspaceSize() uint64 { return t.sh.wsBytes }

// DataSize is the size of the data area that Alloc hands out.
func (t *Team) DataSize() uint64 { return t.sh.dataBytes }

// Transport is the transport the ranks agreed on.
func (t *Team) Transport() Transport { return t.sh.transport }

// Reason says why that transport was chosen, e.g. "auto: all 4 devices
// support multicast", or after a fallback "auto: multicast failed at bind
// multicast memory on rank 2 (cuMulticastBindMem:
// CUDA_ERROR_SYSTEM_NOT_READY (802)); fell back to unicast".
func (t *Team) Reason() string { return t.sh.reason }

// Fallback is the multicast failure that made this team, whose transport
// was chosen automatically, fall back to unicast: the same on every rank
// (the lowest failing rank's). It is nil when no fallback happened.
func (t *Team) Fallback() *FabricError { return t.sh.fallback }

// SMCount is the smallest multiprocessor count of the team's devices.
func (t *Team) SMCount() int { return t.sh.smCount }

// RanksOnDevice is the number of the team's ranks (in every process) that
// run on team rank rank's device, rank included: 1, unless
// WithSharedDevices let ranks share a GPU. Note that rank is a team rank
// (0 to Size()-1), not a local index. Kernels that wait on each other
// need every rank's blocks resident at once, so a device of k ranks
// gives each about 1/k of its SMs.
func (t *Team) RanksOnDevice(rank int) int { return t.sh.onDevice[rank] }

// MaxRanksOnDevice is the largest RanksOnDevice over the team's ranks: 1
// when no GPU is shared.
func (t *Team) MaxRanksOnDevice() int {
	m := 1
	for _, k := range t.sh.onDevice {
		m = max(m, k)
	}
	return m
}

// Driver is the driver the team uses (wrapped in the tracing decorator
// when the logger shows TRACE).
func (t *Team) Driver() cuda.Driver { return t.d }

// Logger is the team's logger.
func (t *Team) Logger() *slog.Logger { return t.log }

func (t *Team) signalBytes() uint64 { return kernels.SignalBytes }

func (t *Team) dataBase(localRank int) uint64 {
	r := t.ranks[localRank]
	return uint64(r.ucBase[r.rank]) + kernels.SignalBytes
}

func (t *Team) peerDataBase(localRank, rank int) uint64 {
	return uint64(t.ranks[localRank].ucBase[rank]) + kernels.SignalBytes
}

// Contains reports whether the n bytes at p lie inside local rank
// localRank's own workspace data area (as its device sees it), and at what
// offset of the data area: a buffer there can be used by the collectives
// without a copy.
func (t *Team) Contains(localRank int, p cuda.DevicePtr, n uint64) (offset uint64, ok bool) {
	base := t.dataBase(localRank)
	if uint64(p) < base {
		return 0, false
	}
	off := uint64(p) - base
	if off >= t.sh.dataBytes || n > t.sh.dataBytes-off {
		return 0, false
	}
	return off, true
}

// Footprint is what a team holds on each GPU, per rank: a GPU shared by
// k ranks (WithSharedDevices) holds k workspaces.
type Footprint struct {
	// Workspace is the physical memory: one allocation of Signal + Data
	// + Padding bytes.
	Workspace uint64
	Signal    uint64
	Data      uint64
	// Padding is what rounding up to the granularities added.
	Padding uint64
	// PeerVA is the virtual address space that maps the peers'
	// workspaces (no memory of its own).
	PeerVA uint64
	// MulticastVA is the multicast alias's address space (its memory is
	// the bound workspace; 0 with unicast).
	MulticastVA uint64
}

func (f Footprint) String() string {
	return fmt.Sprintf("workspace %d B (data %d, signal %d, padding %d); virtual only: peers %d B, multicast %d B",
		f.Workspace, f.Data, f.Signal, f.Padding, f.PeerVA, f.MulticastVA)
}

// Footprint reports the team's memory per GPU.
func (t *Team) Footprint() Footprint {
	f := Footprint{
		Workspace: t.sh.wsBytes,
		Signal:    kernels.SignalBytes,
		Data:      t.sh.dataBytes,
		Padding:   t.sh.wsBytes - kernels.SignalBytes - t.sh.dataBytes,
		PeerVA:    uint64(t.sh.size-1) * t.sh.wsBytes,
	}
	if t.sh.transport == Multicast {
		f.MulticastVA = t.sh.wsBytes
	}
	return f
}

// Fail records err as the team's fatal error (the first one wins): from
// then on Err, Alloc, Run and the collectives return it, until Close.
func (t *Team) Fail(err error) {
	if err == nil {
		return
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.fail == nil {
		t.fail = fmt.Errorf("%w: %w", ErrBroken, err)
		t.log.Error("team: broken", "err", err)
	}
}

// Err returns the fatal error Fail recorded (matching ErrBroken and the
// original error), or nil.
func (t *Team) Err() error {
	t.mu.Lock()
	defer t.mu.Unlock()
	return t.fail
}

// Run runs job.Run(localRank) on every local rank's worker in parallel and
// waits for all of them; it returns the first error. The dispatch itself
// allocates nothing. Run calls are serialized: a job must not call Run.
func (t *Team) Run(job Job) error {
	t.runMu.Lock()
	defer t.runMu.Unlock()
	if t.closed {
		return ErrClosed
	}
	if err := t.Err(); err != nil {
		return err
	}
	for _, r := range t.ranks {
		r.w.mu.Lock()
		r.tick = r.w.submit(job)
	}
	var first error
	for _, r := range t.ranks {
		err := r.w.await(r.tick)
		r.w.mu.Unlock()
		if err != nil && first == nil {
			first = err
		}
	}
	return first
}

// AllGather gathers b from every rank of the team, after the bring-up,
// through the bootstrap the team was brought up with: the result holds
// every rank's b, indexed by team rank (this process's own included).
// Every local rank contributes b: one process speaks for all the ranks it
// drives (with New, every entry is b). Like every collective of the
// bootstrap it is collective: every process of the team calls it, in
// the same order relative to the other collectives of that bootstrap
// (the caller's own, with NewRank, included); package collectives uses it
// in collectives.New to agree on its configuration.
//
// It is bounded by ctx and by the team's setup timeout (WithSetupTimeout,
// NVLS_SETUP_TIMEOUT, and with New DefaultSetupTimeout; a NewRank team
// given neither leaves the deadline to ctx and its bootstrap, as its
// bring-up did). A rank that does not arrive in time is named: the error
// is then a *MissingRanksError (ErrPeerMissing, context.DeadlineExceeded).
// Bootstraps do not recover from a failed collective (the in-process one
// and team/mpi's stay broken): every later AllGather of the team fails
// with the same error. A completed AllGather leaves the bootstrap as it
// was, whatever the ranks sent.
//
// AllGather calls are serialized. It returns ErrClosed after Close, and
// the team's error once it is broken (Fail).
func (t *Team) AllGather(ctx context.Context, b []byte) ([][]byte, error) {
	t.bootMu.Lock()
	defer t.bootMu.Unlock()
	if t.closed {
		return nil, ErrClosed
	}
	if err := t.Err(); err != nil {
		return nil, err
	}
	if t.setupTimeout > 0 {
		var cancel context.CancelFunc
		ctx, cancel = context.WithTimeout(ctx, t.setupTimeout)
		defer cancel()
	}
	outs := make([][][]byte, len(t.ranks))
	errs := make([]error, len(t.ranks))
	gather := func(i int) {
		r := t.ranks[i]
		outs[i], errs[i] = r.boot.AllGather(ctx, b)
		if errs[i] != nil {
			errs[i] = fmt.Errorf("team: rank %d: AllGather: %w", r.rank, errs[i])
		} else if len(outs[i]) != t.sh.size {
			errs[i] = fmt.Errorf("team: rank %d: AllGather: %d entries from the bootstrap, want %d", r.rank, len(outs[i]), t.sh.size)
		}
	}
	if len(t.ranks) == 1 {
		gather(0)
	} else {
		// The local ranks' bootstraps meet each other: each needs a
		// goroutine of its own.
		var wg sync.WaitGroup
		for i := range t.ranks {
			wg.Go(func() { gather(i) })
		}
		wg.Wait()
	}
	for _, err := range errs {
		if err != nil {
			return nil, err
		}
	}
	return outs[0], nil
}

// Alloc hands out a symmetric buffer of size bytes (rounded up to 16) from
// the data area, at the same offset on every rank, aligned to Alignment.
// With several processes (NewRank), every process must make the same
// Alloc and Free calls in the same order, so that offsets match.
func (t *Team) Alloc(size uint64) (Buffer, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.alloc == nil {
		return Buffer{}, ErrClosed
	}
	if t.fail != nil {
		return Buffer{}, t.fail
	}
	off, rounded, id, err := t.alloc.alloc(size)
	if err != nil {
		return Buffer{}, fmt.Errorf("team: alloc %d bytes: %w", size, err)
	}
	return Buffer{t: t, off: off, size: rounded, id: id}, nil
}

// Free returns a buffer. Freeing a buffer twice, or one of another team,
// is an error (ErrBadFree).
func (t *Team) Free(b Buffer) error {
	if b.t != t {
		return fmt.Errorf("team: free: %w: the buffer belongs to another team", ErrBadFree)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.alloc == nil {
		return ErrClosed
	}
	if err := t.alloc.release(b.off, b.id); err != nil {
		return fmt.Errorf("team: free: %w", err)
	}
	return nil
}

// Close tears the team down in reverse order of the bring-up and stops
// the workers; it goes on past failures and returns them all. A second
// Close returns nil.
func (t *Team) Close() error {
	t.runMu.Lock()
	defer t.runMu.Unlock()
	if t.closed {
		return nil
	}
	// No AllGather runs while the team's own bootstraps close.
	t.bootMu.Lock()
	defer t.bootMu.Unlock()
	t.closed = true
	t.mu.Lock()
	t.alloc = nil
	t.mu.Unlock()
	return t.teardown()
}

// teardown undoes whatever the ranks hold, phase by phase across the
// local ranks (each step on the rank's worker): multicast unmap, unbind,
// release; peer mappings unmapped, their ranges freed, imported handles
// released; the own mapping unmapped, its range freed, the memory
// released; then the workers stopped (releasing the contexts) and the
// team's own bootstraps closed. A resource whose step failed stays in the
// books and the phases run once more for what is left, so that one failed
// driver call does not leak what depends on it.
func (t *Team) teardown() error { return t.teardownRanks(t.ranks, true) }

// teardownRanks is the teardown of some ranks. Unless final (the ranks
// are then all the team's, and the last teardown), a rank whose
// multicast object another rank still holds keeps it, and a rank that
// still holds something keeps its worker, for the final teardown.
func (t *Team) teardownRanks(rs []*rankState, final bool) error {
	errs := t.teardownPass(rs, final)
	if len(errs) > 0 {
		if again := t.teardownPass(rs, final); len(again) > 0 {
			errs = append(errs, fmt.Errorf("team: %s: retry: %w", stepTeardown, errors.Join(again...)))
		}
	}
	for _, r := range rs {
		if r.w == nil || (!final && r.holds()) {
			continue
		}
		if err := r.w.stop(); err != nil {
			errs = append(errs, fmt.Errorf("team: rank %d (device %d): %s: stop worker: %w", r.rank, r.dev, stepTeardown, err))
		}
		r.w = nil
	}
	if final {
		for _, b := range t.boots {
			if err := b.Close(); err != nil {
				errs = append(errs, fmt.Errorf("team: close bootstrap: %w", err))
			}
		}
		t.boots = nil
	}
	return errors.Join(errs...)
}

func (t *Team) teardownPass(rs []*rankState, final bool) []error {
	var errs []error
	phase := func(name string, f func(r *rankState) error) {
		for _, r := range rs {
			if r.w == nil {
				continue
			}
			if err := r.w.do(func() error { return f(r) }); err != nil {
				errs = append(errs, fmt.Errorf("team: rank %d (device %d): %s: %s: %w", r.rank, r.dev, stepTeardown, name, err))
			}
		}
	}
	phase("unmap multicast object", func(r *rankState) error {
		if r.mc == nil || r.mcBase == 0 {
			return nil
		}
		if err := r.mc.UnmapMC(r.mcBase); err != nil {
			return err
		}
		r.mcBase = 0
		return nil
	})
	phase("unbind multicast memory", func(r *rankState) error {
		if r.mc == nil || !r.mcBound || r.mcBase != 0 {
			return nil // still mapped: the object's Close below sorts it out
		}
		if err := r.mc.Unbind(r.dev, 0, r.mcBytes); err != nil {
			return err
		}
		r.mcBound = false
		return nil
	})
	// Attached and imported objects first; the creator's Close releases
	// the handle only once no other local rank holds the object. Close
	// also does whatever is left (a failed unmap or unbind).
	releaseMC := func(creator bool) {
		phase("release multicast object", func(r *rankState) error {
			if r.mc == nil || (r.mc.Origin() == multicast.Created) != creator {
				return nil
			}
			if creator {
				for _, o := range t.ranks {
					if o != r && o.mc != nil {
						if !final {
							return nil // the final teardown releases it
						}
						return fmt.Errorf("rank %d still holds the multicast object", o.rank)
					}
				}
			}
			if err := r.mc.Close(); err != nil {
				return err
			}
			r.mc, r.mcBase, r.mcBound = nil, 0, false
			return nil
		})
	}
	releaseMC(false)
	releaseMC(true)
	phase("unmap peer workspaces", func(r *rankState) error {
		var pe []error
		for q := range r.peers {
			p := &r.peers[q]
			if p.m == nil {
				continue
			}
			if err := p.m.Close(); err != nil {
				pe = append(pe, fmt.Errorf("rank %d: %w", q, err))
				continue
			}
			p.m = nil
			r.ucBase[q] = 0
		}
		return errors.Join(pe...)
	})
	phase("free peer ranges", func(r *rankState) error {
		var pe []error
		for q := range r.peers {
			p := &r.peers[q]
			if p.res == nil || p.m != nil {
				continue
			}
			if err := p.res.Close(); err != nil {
				pe = append(pe, fmt.Errorf("rank %d: %w", q, err))
				continue
			}
			p.res = nil
		}
		return errors.Join(pe...)
	})
	phase("release imported peer handles", func(r *rankState) error {
		var pe []error
		for q := range r.peers {
			p := &r.peers[q]
			if p.alloc == nil || p.m != nil {
				continue
			}
			if err := p.alloc.Close(); err != nil {
				pe = append(pe, fmt.Errorf("rank %d: %w", q, err))
				continue
			}
			p.alloc = nil
		}
		return errors.Join(pe...)
	})
	phase("unmap workspace", func(r *rankState) error {
		if r.ownMap == nil {
			return nil
		}
		if err := r.ownMap.Close(); err != nil {
			return err
		}
		r.ownMap = nil
		r.ucBase[r.rank] = 0
		return nil
	})
	phase("free workspace range", func(r *rankState) error {
		if r.ownRes == nil || r.ownMap != nil {
			return nil
		}
		if err := r.ownRes.Close(); err != nil {
			return err
		}
		r.ownRes = nil
		return nil
	})
	phase("release workspace memory", func(r *rankState) error {
		// Released even while a mapping failed to go: the mapping keeps
		// the memory until it is unmapped.
		if r.own == nil || (r.mc != nil && r.mcBound) {
			return nil
		}
		if err := r.own.Close(); err != nil {
			return err
		}
		r.own = nil
		return nil
	})
	return errs
}
