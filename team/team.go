package team

import (
	"fmt"
	"log/slog"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nvls-go/nvls/cuda"
	"github.com/nvls-go/nvls/internal/kabi"
)

// Team is a set of GPUs with a symmetric workspace: one per rank, the same
// size and layout on every rank, mapped on every rank's device (and, with
// the multicast transport, bound to one multicast object mapped on every
// device). A Team holds the ranks local to this process: all of them (New)
// or one (NewRank, one process per GPU).
type Team struct {
	d      cuda.Driver
	log    *slog.Logger
	agreed agreement
	ranks  []*rank
	// boots are closed with the team when the team made them (New).
	boots []Bootstrap

	runMu  sync.Mutex // serializes Run and Close
	closed bool       // set under runMu and bootMu
	// gone mirrors closed for readers that hold neither lock (Closed).
	gone atomic.Bool
	// bootMu serializes AllGather (and Close against it): a bootstrap's
	// collectives are called one at a time.
	bootMu sync.Mutex
	// setupTimeout bounds AllGather like the bring-up's exchanges: New's
	// (always set), NewRank's where given (0: ctx and the bootstrap's own
	// default).
	setupTimeout time.Duration
	// setupTimeoutSrc: where setupTimeout came from (resolved's).
	setupTimeoutSrc string

	mu    sync.Mutex // guards alloc and fail
	alloc *allocator
	fail  error
}

// Size is the number of ranks in the team (all processes).
func (t *Team) Size() int { return t.agreed.size }

// NumLocal is the number of ranks driven by this process.
func (t *Team) NumLocal() int { return len(t.ranks) }

// Rank is the team rank of local rank localRank.
func (t *Team) Rank(localRank int) int { return t.ranks[localRank].rank }

// Device is local rank localRank's device.
func (t *Team) Device(localRank int) cuda.Device { return t.ranks[localRank].dev }

// Context is local rank localRank's device's primary context (current on
// its worker).
func (t *Team) Context(localRank int) cuda.Context { return t.ranks[localRank].primary }

// ucBases are the bases of every rank's workspace as local rank
// localRank's device sees them: entry r is rank r's workspace (its own
// through its UC alias, the others through the peer mappings); entries
// from Size() on are 0.
func (t *Team) ucBases(localRank int) [kabi.MaxRanks]cuda.DevicePtr {
	return t.ranks[localRank].ucBase
}

// mcBaseOf is the base of the multicast alias on local rank localRank's
// device, or 0 with the unicast transport.
func (t *Team) mcBaseOf(localRank int) cuda.DevicePtr { return t.ranks[localRank].mcBase }

// layout is every rank's workspace: the signal area, the data area and
// the granularity padding.
func (t *Team) layout() kabi.Layout { return t.agreed.layout }

// DataSize is the size of the data area that Alloc hands out.
func (t *Team) DataSize() uint64 { return t.agreed.layout.Data }

// Transport is the transport the ranks agreed on.
func (t *Team) Transport() Transport { return t.agreed.transport }

// Reason says why that transport was chosen, e.g. "auto: all 4 devices
// support multicast", or after a fallback "auto: multicast failed at bind
// multicast memory on rank 2 (cuMulticastBindMem:
// CUDA_ERROR_SYSTEM_NOT_READY (802)); fell back to unicast".
func (t *Team) Reason() string { return t.agreed.reason }

// Fallback is the multicast failure that made this team, whose transport
// was chosen automatically, fall back to unicast: the same on every rank
// (the lowest failing rank's). It is nil when no fallback happened.
func (t *Team) Fallback() *FabricError { return t.agreed.fallback }

// SMCount is the smallest multiprocessor count of the team's devices.
func (t *Team) SMCount() int { return t.agreed.smCount }

// RanksOnDevice is the number of the team's ranks (in every process) that
// run on team rank rank's device, rank included: 1, unless
// WithSharedDevices let ranks share a GPU. Note that rank is a team rank
// (0 to Size()-1), not a local index. Kernels that wait on each other
// need every rank's blocks resident at once, so a device of k ranks
// gives each about 1/k of its SMs.
func (t *Team) RanksOnDevice(rank int) int { return t.agreed.onDevice[rank] }

// maxRanksOnDevice is the largest RanksOnDevice over the team's ranks: 1
// when no GPU is shared.
func (t *Team) maxRanksOnDevice() int {
	m := 1
	for _, k := range t.agreed.onDevice {
		m = max(m, k)
	}
	return m
}

// Driver is the driver the team uses (wrapped in the tracing decorator
// when the logger shows TRACE).
func (t *Team) Driver() cuda.Driver { return t.d }

// Logger is the team's logger.
func (t *Team) Logger() *slog.Logger { return t.log }

func (t *Team) dataBase(localRank int) uint64 {
	r := t.ranks[localRank]
	return uint64(r.ucBase[r.rank]) + t.agreed.layout.DataStart()
}

func (t *Team) peerDataBase(localRank, rank int) uint64 {
	return uint64(t.ranks[localRank].ucBase[rank]) + t.agreed.layout.DataStart()
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
	if data := t.agreed.layout.Data; off >= data || n > data-off {
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
	l := t.agreed.layout
	f := Footprint{
		Workspace: l.Size(),
		Signal:    l.Signal(),
		Data:      l.Data,
		Padding:   l.Padding(),
		PeerVA:    uint64(t.agreed.size-1) * l.Size(),
	}
	if t.agreed.transport == Multicast {
		f.MulticastVA = l.Size()
	}
	return f
}

// markFailed records err as the team's fatal error (the first one wins): from
// then on Err, Alloc, Run and the collectives return it, until Close.
func (t *Team) markFailed(err error) {
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

// Closed reports whether Close has been called (its workspaces are then
// unmapped, or being unmapped). It never blocks.
func (t *Team) Closed() bool { return t.gone.Load() }

// usable is why the team takes no more work: ErrClosed after Close, its
// error once broken; nil while it works. The caller holds runMu or bootMu
// (closed is set under both).
func (t *Team) usable() error {
	if t.closed {
		return ErrClosed
	}
	return t.Err()
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
	t.gone.Store(true)
	t.mu.Lock()
	t.alloc = nil
	t.mu.Unlock()
	return t.teardown(t.ranks, true)
}
