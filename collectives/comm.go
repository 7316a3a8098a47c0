package collectives

import (
	"context"
	"errors"
	"fmt"
	"math"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"
	"unsafe"

	"github.com/nvls-go/nvls/cuda"
	"github.com/nvls-go/nvls/internal/kabi"
	"github.com/nvls-go/nvls/internal/teamlink"
	"github.com/nvls-go/nvls/kernels"
	"github.com/nvls-go/nvls/ptx"
	"github.com/nvls-go/nvls/team"
)

// Comm runs the collectives on one team. Make it with New, usually once per
// team, and Close it before the team. The kernels' barrier counters live
// in the team's workspace and are shared by every Comm of the team: the
// collectives of all of them must reach every rank's device in the same
// order (issue them on the same streams, or order them otherwise), as
// those of one Comm must. Its methods may be called from any goroutine;
// calls are serialized.
//
// A Comm keeps no state of one call for the next: a call is planned into
// a call value (its parts, one per local rank), which run and the
// launches take as an argument and which is dropped (returned to the
// Comm's pool of scratch, reset before its next use) when the call
// returns. What the Comm keeps between calls is its configuration, its
// ranks' fixed state and what later calls and Close must know: the
// stream each rank last launched on and whether a Sync found it idle,
// the last stream found to be of each rank's context.
type Comm struct {
	t       *team.Team
	tl      teamlink.Team // what the Comm uses of t beyond team's API
	d       cuda.Driver
	flavor  kernels.Flavor
	cfg     config
	size    int // ranks in the team
	nlocal  int // ranks driven by this process
	maxGrid uint64
	// minGrid is the grid a launch spreads its vectors over at one a
	// thread before threads take blockVecs/BlockThreads (WithMinGrid).
	minGrid uint64
	// sharedDevs: two ranks of the team run on one device
	// (team.WithSharedDevices), as the team agreed, so every rank picks
	// the same kernels and flags (the one-GPU shapes: launch.go, ce.go);
	// local ranks that share one must not use the legacy default stream
	// (checkStreams).
	sharedDevs bool
	// blockVecs is how many 16-byte vectors of a rank's share make one
	// more block (BlockThreads * vecsPerThread; tests lower it to get
	// many blocks from little data).
	blockVecs uint64
	// pushMin is the smallest broadcast launch that pushes (pushBroadcast;
	// defaultPushMin, tests lower it).
	pushMin uint64
	// ring is the ring reduce's FIFO, ringBytes at workspace offset
	// ringOff, allocated where the ring is on (WithRingMin, 2 ranks or
	// more, unicast).
	ring      team.Buffer
	ringHeld  bool
	ringOff   uint64
	ringBytes uint64
	// lay is every rank's workspace (the team's): where the signal and
	// data areas are, and its size.
	lay kabi.Layout

	stage      team.Buffer
	stageHeld  bool   // stage is allocated (New; Close frees it)
	stageA     uint64 // workspace offset of staging area A (B follows at stageA+stageBytes)
	stageBytes uint64

	// llMax is the largest all-reduce that runs LL (0: none; also 0 when
	// the loaded PTX has no LL kernels); the LL area, llBytes at
	// workspace offset llOff, is allocated when it is not 0.
	llMax   uint64
	ll      team.Buffer
	llHeld  bool // ll is allocated
	ptxLL   bool // every local rank's module has the LL kernels
	llOff   uint64
	llBytes uint64
	llLines uint64 // the LL area's capacity in lines per parity and source

	ranks []*rankState
	// defStreams is every local rank's default stream (all 0): the
	// streams of a typed call given no Streams (typed.go). Never written.
	defStreams []cuda.Stream
	// regions are the address ranges of the team's workspaces as this
	// process maps them (own, peers, multicast): a pointer in one of
	// them that is not a usable data-area pointer is refused, and other
	// Comms refuse pointers into them.
	regions []span

	// meet0 gathers the parts of the call the Ranks are making (rank.go).
	meet0 meeting

	// mu serializes the calls (collectives, Sync, Close). team.Run and
	// RunHere already keep one call's launches together on every rank,
	// so that is not what it is for: Close must not free the staging
	// areas, modules and status words under a call, and the state a call
	// leaves for the next (rankState's streamOK, inflight and lastStream,
	// noDirect) is written outside the team's lock (the stream check,
	// Sync's verdict).
	mu     sync.Mutex
	closed bool
	// calls recycles the calls' scratch (a call and its parts; New),
	// so that a call allocates nothing.
	calls sync.Pool
	// oneCtx: every local rank runs in one context (teamlink.Team.OneContext);
	// via is where calls launch (WithLaunch, NVLS_LAUNCH; onCaller), also
	// set by the tests and the GPU benchmark to compare the ways.
	oneCtx bool
	via    Launch
	// pdl is how the kernels launch (decidePDL: PDLOff, PDLWait or
	// PDLEarly, never PDLAuto), pdlWhy why, for the log line.
	pdl    PDL
	pdlWhy string
	// plainLaunch: the driver predates cuLaunchKernelEx, so kernels
	// launch with cuLaunchKernel (pdl is PDLOff then).
	plainLaunch bool
	// noDirect: Sync polls every stream on the workers (the driver
	// refused cuStreamQuery without a current context once).
	noDirect bool
	// skip is a test hook: local ranks whose launches are left out, to
	// play a rank that never arrives.
	skip []bool
}

// rankState is everything one local rank needs, preallocated.
type rankState struct {
	local int
	rank  int
	dev   cuda.Device
	ctx   cuda.Context
	mod   *kabi.Module
	// ucMod (multicast Comms only) is the unicast flavor's kernels, for
	// the types and operators multimem cannot reduce (f32 min and max):
	// they run over the UC aliases, which every team maps.
	ucMod *kabi.Module
	// own is the base of the rank's own workspace (its UC alias), mc the
	// multicast alias' (0 with unicast), peer the bases of every rank's
	// workspace as this device maps them.
	own, mc uint64
	peer    [kabi.MaxRanks]uint64
	// base holds the fields every launch shares (MC, UC, rank, ranks,
	// timeout).
	base kabi.Params
	// hostStatus is the rank's status word in mapped host memory
	// (hostMem, allocated in New; Params.HostStatus is its device
	// address): its kernels write it, Sync loads it. statusStream is a
	// non-blocking stream of the Comm's own (New's LL-area barrier).
	hostMem      unsafe.Pointer
	hostStatus   *uint64
	statusStream cuda.Stream
	// side, fork and join (copy-engine Comms only: usesCE) run the
	// rank's own copy beside the copy to the peer: side waits for fork,
	// recorded on the call's stream, and the call's stream for join,
	// recorded on side after the copy.
	side       cuda.Stream
	fork, join cuda.Event

	// inflight: the rank launched on lastStream since a Sync last found
	// that stream idle (Close waits for it before freeing hostMem).
	inflight   bool
	lastStream cuda.Stream
	// launches counts what the rank enqueued (kernels and copies), so
	// that Streams.Capture can tell which Comms a graph holds work of.
	launches uint64

	// streamOK is the last stream found to be of the rank's context
	// (checkStreams in plan.go): the same handle again is not asked.
	streamOK cuda.Stream
}

// part is one local rank's share of a call: its pointers and stream, how
// they were classified, the params of its launches and, for Sync, what
// the wait found. It reads its rank's fixed state through rankState.
type part struct {
	*rankState
	send, recv       cuda.DevicePtr
	stream           cuda.Stream
	sendIn, recvIn   bool   // inside the data area, usable without a copy
	sendOff, recvOff uint64 // workspace offsets when inside
	sendChk, recvChk bool   // needs the driver's check (not in any team region)
	launched         bool
	// p is the params of the rank's launch, passed by address.
	p kabi.Params

	// Sync: the stream failed (qErr), was found idle, or was still busy
	// at the deadline.
	qErr       error
	idle, busy bool
}

// span is an address range [lo, hi).
type span struct{ lo, hi uint64 }

func (s span) contains(p uint64) bool { return p >= s.lo && p < s.hi }

// call is one call of the Comm (a collective, or Sync): the plan every
// rank must see, and each local rank's part. A call is planned (plan.go,
// colls.go), passed down to run and the launches, and released when the
// call returns (getCall, putCall).
type call struct {
	c     *Comm
	parts []part // one per local rank, in local rank order
	name  string
	coll  kernels.Coll
	dt    DType
	op    Op
	// count is in elements of esize bytes, as the caller gave it, and
	// stays so down to kabi.Params.Count; bytes = count*esize sizes the
	// copies, the checks and the algorithm choice. sendBytes and recvBytes
	// are each rank's send and recv: bytes, but nranks x bytes for a
	// reduce-scatter's send and an all-gather's recv.
	count, esize, bytes  uint64
	sendBytes, recvBytes uint64
	root                 int // team rank (broadcast, reduce)
	// rootLocal is the local index of the root, or -1 when another
	// process drives it.
	rootLocal int
	// sendZC / recvZC: the pointers are used without a copy, at offsets
	// sendOff / recvOff of every rank's workspace.
	sendZC, recvZC   bool
	sendOff, recvOff uint64
	inPlace          bool
	chunked          bool
	foreign          bool // some pointer needs the driver's check

	// checked counts the workers done with checkAll; checkFailed says
	// one found a bad pointer.
	checked     atomic.Int32
	checkFailed atomic.Bool

	// Sync's wait on the workers or the caller (syncJob): ctx, when it
	// began and until when.
	ctx             context.Context
	start, deadline time.Time
}

// getCall returns a call for name with one part per local rank, every
// other field zero (root -1: none local), from the Comm's pool.
func (c *Comm) getCall(name string) *call {
	cl := c.calls.Get().(*call)
	parts := cl.parts
	for l := range parts {
		parts[l] = part{rankState: c.ranks[l]}
	}
	*cl = call{c: c, parts: parts, name: name, rootLocal: -1}
	return cl
}

// putCall gives cl back to the pool; nothing of it is read again.
func (c *Comm) putCall(cl *call) {
	cl.ctx = nil
	c.calls.Put(cl)
}

// newCallScratch is the pool's New: a call with a part per local rank.
func (c *Comm) newCallScratch() any {
	return &call{parts: make([]part, c.nlocal)}
}

// check is the call's Params.Check: what every rank's kernels compare
// (kabi.CheckArgs), with the element type, operator and root where the
// collective has them.
func (cl *call) check() uint32 {
	d := cl.coll.Desc()
	var op kernels.RedOp
	if d.Reduces {
		op = cl.op
	}
	root := 0
	if d.Rooted {
		root = cl.root
	}
	return kabi.CheckArgs(d.Opcode, cl.dt, op, root)
}

// The process's live Comms, so that a pointer into another team's
// workspace is refused by name.
var registry struct {
	mu    sync.RWMutex
	comms []*Comm
}

func register(c *Comm) {
	registry.mu.Lock()
	registry.comms = append(registry.comms, c)
	registry.mu.Unlock()
}

func unregister(c *Comm) {
	registry.mu.Lock()
	registry.comms = slices.DeleteFunc(registry.comms, func(o *Comm) bool { return o == c })
	registry.mu.Unlock()
}

// otherTeam reports whether p lies in the workspace of a team other than
// c's that has a live Comm. A Comm whose team was closed before it (a
// misuse Close tolerates) does not count: its workspace is gone, and its
// addresses may be another allocation's now.
func (c *Comm) otherTeam(p uint64) bool {
	registry.mu.RLock()
	defer registry.mu.RUnlock()
	for _, o := range registry.comms {
		if o.t == c.t || o.t.Closed() {
			continue
		}
		for _, s := range o.regions {
			if s.contains(p) {
				return true
			}
		}
	}
	return false
}

// New makes the collectives of team t: NewContext with
// context.Background(), so that the agreement between the ranks (below)
// is bounded by the team's setup timeout alone (team.WithSetupTimeout,
// NVLS_SETUP_TIMEOUT, team.DefaultSetupTimeout for team.New; for a
// team.NewRank team given none, the bootstrap's own default, e.g.
// team/mpi's).
func New(t *team.Team, opts ...Option) (*Comm, error) {
	return NewContext(context.Background(), t, opts...)
}

// NewContext makes the collectives of team t: it loads the PTX of the
// team's flavor (multicast iff t's transport is multicast) on every local
// device, in that device's worker, resolves every kernel, allocates the
// two staging areas from the workspace (WithStageBytes each; this needs
// that much free in the data area) and creates a non-blocking stream per
// device for Sync's status reads. With LL on (WithLLMax, NVLS_LL_MAX; the
// default is DefaultLLMax) it also allocates the LL area,
// 4 x llMax x ranks bytes, from the workspace. The options
// win over NVLS_LL_MAX, NVLS_ONESHOT_MAX, NVLS_GRID, NVLS_MIN_GRID,
// NVLS_CE_MIN and NVLS_TIMEOUT; a bad value of those is an error naming
// the variable.
//
// It is collective: every rank of the team calls it (every process, under
// MPI), in the same order relative to the team's collectives and to the
// other collectives of the team's bootstrap. Once its own part is done,
// each process all-gathers (team.Team.AllGather) its outcome and the
// configuration it resolved, after every per-team adjustment (the
// kernels' flavor, the LL limit, 0 where the loaded PTX has no LL kernels,
// the one-shot limit, the largest grid, the kernels' timeout and the
// staging size), so that all ranks go on with one configuration or none
// does:
//
//   - when the configurations differ, every rank returns the same
//     *ConfigMismatchError (errors.Is ErrConfigMismatch and ErrInvalid),
//     naming each setting that differs and every rank's value and its
//     source (option, environment variable or default);
//   - when a rank failed before (a bad option or variable, a staging
//     area that does not fit, a driver error loading the kernels), it
//     returns its own error and the others a *team.PeerError naming it
//     (errors.Is team.ErrPeerFailed);
//   - when a rank does not call it in time, the others' error names it
//     (*team.MissingRanksError, errors.Is team.ErrPeerMissing and
//     context.DeadlineExceeded).
//
// ctx and the team's setup timeout bound that exchange (the earlier
// deadline wins); nothing else of NewContext waits for the other ranks
// on the host. Whatever NewContext acquired is released on failure. A
// mismatch or a rank's own failure leaves the team and its bootstrap as
// they were: a corrected NewContext on every rank may follow. A rank that
// did not arrive breaks the bootstrap (bootstraps do not recover from a
// missed collective), so later calls fail too: close the team.
//
// After the exchange, with LL on, every rank zeroes its LL area and meets
// the others in a device barrier (bounded by the kernels' timeout), so
// that no rank pushes LL lines into an area its owner has yet to zero.
func NewContext(ctx context.Context, t *team.Team, opts ...Option) (*Comm, error) {
	if ctx == nil {
		return nil, fmt.Errorf("collectives: %w: NewContext: nil context", ErrInvalid)
	}
	if t == nil {
		return nil, fmt.Errorf("collectives: %w: New: nil team", ErrInvalid)
	}
	if err := t.Err(); err != nil {
		return nil, fmt.Errorf("collectives: New: %w", err)
	}
	tl := teamlink.Of(t)
	c := &Comm{t: t, tl: tl, d: t.Driver(), size: t.Size(), nlocal: t.NumLocal(), oneCtx: tl.OneContext()}
	c.defStreams = make([]cuda.Stream, c.nlocal)
	c.calls.New = c.newCallScratch
	err := c.prepare(opts)
	if err := c.agree(ctx, err); err != nil {
		return nil, errors.Join(err, c.undo())
	}
	if c.llMax != 0 {
		// Zeroed: lines with flag 0 never match an epoch (the data area
		// may hold anything, e.g. a freed user buffer full of small
		// integers). Then a device barrier, so that no rank (another
		// process, under MPI) pushes LL lines into an area its owner has
		// yet to zero.
		if err := c.t.Run(team.JobFunc(func(l int) error { return c.zeroLL(c.ranks[l]) })); err != nil {
			return nil, errors.Join(fmt.Errorf("collectives: New: %w", err), c.undo())
		}
	}
	register(c)
	cfg := &c.cfg
	t.Logger().Info("collectives: ready",
		"flavor", c.flavor, "ranks", c.size, "local", c.nlocal,
		"ll_max", c.llMax, "ll_max_from", cfg.llSrc, "ll_area_bytes", c.llBytes, "ll_two_max", cfg.llTwoMax, "ll_two_bcast_max", cfg.llTwoBcastMax,
		"oneshot_max", cfg.oneShotMax, "oneshot_max_from", cfg.oneShotSrc,
		"max_grid", c.maxGrid, "grid_from", cfg.gridSrc, "min_grid", c.minGrid, "min_grid_from", cfg.minGridSrc, "sm", t.SMCount(), "ranks_per_device", c.tl.MaxRanksOnDevice(),
		"timeout", cfg.timeout, "timeout_from", cfg.timeoutSrc,
		"stage_bytes", c.stageBytes, "pdl", c.pdl, "pdl_from", c.pdlWhy)
	return c, nil
}

// prepare is this process's part of New before the ranks agree: resolve
// the configuration and adjust it to the team, allocate the staging
// areas, load the kernels and create the status streams on every local
// rank, decide LL and allocate its area (not zeroed yet). On error, c
// holds what was acquired, for undo.
func (c *Comm) prepare(opts []Option) error {
	t := c.t
	cfg, err := resolve(opts)
	if err != nil {
		return err
	}
	c.cfg = cfg.sized(c.size)
	c.via = c.cfg.launch
	c.flavor = FlavorOf(t.Transport())
	c.maxGrid = uint64(gridLimit(&c.cfg, t.SMCount(), c.tl.MaxRanksOnDevice()))
	c.sharedDevs = c.tl.MaxRanksOnDevice() > 1
	if c.sharedDevs && c.cfg.pullFrom == fromDefault {
		c.cfg.pullMin = 0 // the two-shot uses every sharing rank's SMs
	}
	c.minGrid = uint64(c.cfg.minGrid)
	c.lay = c.tl.Layout()
	c.stageBytes, c.blockVecs = c.cfg.stage, kabi.BlockThreads*vecsPerThread
	c.pushMin = defaultPushMin
	if 2*c.stageBytes > t.DataSize() {
		return fmt.Errorf("collectives: %w: New: the two staging areas (2 x %d bytes, WithStageBytes) do not fit in the team's %d-byte data area (team.WithWorkspaceSize)", ErrInvalid, c.stageBytes, t.DataSize())
	}
	c.stage, err = t.Alloc(2 * c.stageBytes)
	if err != nil {
		return fmt.Errorf("collectives: New: allocating the staging areas (2 x %d bytes, WithStageBytes) from the team's workspace: %w", c.stageBytes, err)
	}
	c.stageHeld = true
	c.stageA = c.lay.At(c.stage.Offset())
	if c.flavor == kernels.Unicast && c.size >= 2 && c.cfg.ringMin != 0 {
		c.ring, err = t.Alloc(c.cfg.ringBytes)
		if err != nil {
			return fmt.Errorf("collectives: New: allocating the ring reduce's FIFO (%d bytes, %s; WithRingMin 0 turns the ring off) from the team's workspace: %w",
				c.cfg.ringBytes, sourceName(uint8(c.cfg.ringBytesFrom), "WithRingBytes", EnvRingBytes), err)
		}
		c.ringHeld, c.ringBytes = true, c.cfg.ringBytes
		c.ringOff = c.lay.At(c.ring.Offset())
	}
	for l := range c.nlocal {
		rs := &rankState{local: l, rank: t.Rank(l), dev: t.Device(l), ctx: t.Context(l)}
		ucs := c.tl.UCBases(l)
		for q := range c.size {
			rs.peer[q] = uint64(ucs[q])
			c.regions = append(c.regions, span{uint64(ucs[q]), uint64(ucs[q]) + c.lay.Size()})
		}
		rs.own = rs.peer[rs.rank]
		rs.mc = uint64(c.tl.MCBase(l))
		if rs.mc != 0 {
			c.regions = append(c.regions, span{rs.mc, rs.mc + c.lay.Size()})
		}
		rs.base = kabi.Params{MC: rs.mc, Rank: uint32(rs.rank), NRanks: uint32(c.size), TimeoutNs: uint64(c.cfg.timeout)}
		rs.base.UC = rs.peer
		c.ranks = append(c.ranks, rs)
	}
	if err := t.Run(team.JobFunc(func(l int) error { return c.setupRank(c.ranks[l]) })); err != nil {
		return fmt.Errorf("collectives: New: %w", err)
	}
	if err := c.decidePDL(); err != nil {
		return err
	}
	return c.setupLL()
}

// decidePDL settles how the kernels launch (WithPDL, NVLS_PDL): PDLAuto
// becomes PDLWait where pdlMissing finds nothing missing, else PDLOff; an
// explicit PDLWait or PDLEarly that cannot be had is an error.
func (c *Comm) decidePDL() error {
	v, err := c.d.DriverVersion()
	if err != nil {
		return fmt.Errorf("collectives: New: deciding PDL: %w", err)
	}
	// cuLaunchKernelEx is CUDA 11.6's (its entry point's ABI version);
	// an older driver gets cuLaunchKernel, and no PDL.
	c.plainLaunch = v < 11060
	mode := c.cfg.pdl
	if mode == PDLOff {
		c.pdl, c.pdlWhy = PDLOff, c.cfg.pdlSrc
		return nil
	}
	why, err := c.pdlMissing(v)
	if err != nil {
		return fmt.Errorf("collectives: New: deciding PDL: %w", err)
	}
	if why == "" && mode == PDLEarly && c.tl.MaxRanksOnDevice() > 1 {
		why = "ranks share a device (every sharing rank's kernel must be resident at once)"
	}
	switch {
	case why != "" && mode == PDLAuto:
		c.pdl, c.pdlWhy = PDLOff, why
	case why != "":
		return fmt.Errorf("collectives: %w: New: %s=%v: %s", ErrInvalid, c.cfg.pdlSrc, mode, why)
	case mode == PDLAuto:
		c.pdl, c.pdlWhy = PDLWait, "default"
	default:
		c.pdl, c.pdlWhy = mode, c.cfg.pdlSrc
	}
	return nil
}

// pdlMissing says what the node lacks for programmatic launches, "" if
// nothing: CUDA 12.3 (programmatic launches captured into graphs; v is
// the driver's version),
// compute capability 9.0 on every local device, and PTX whose every entry
// point waits at entry. A driver call that fails is an error.
func (c *Comm) pdlMissing(v int) (string, error) {
	if v < 12030 {
		return fmt.Sprintf("the driver is CUDA %d.%d, and PDL in graphs needs 12.3", v/1000, v%1000/10), nil
	}
	for _, rs := range c.ranks {
		major, err := c.d.DeviceAttribute(cuda.AttrComputeCapabilityMajor, rs.dev)
		if err != nil {
			return "", fmt.Errorf("device %d's compute capability: %w", rs.dev, err)
		}
		if major < 9 {
			return fmt.Sprintf("device %d is of compute capability %d.x, and PDL needs 9.0", rs.dev, major), nil
		}
		if !rs.mod.GridDepWait() || (rs.ucMod != nil && !rs.ucMod.GridDepWait()) {
			return "the loaded PTX has entry points without griddepcontrol.wait (generated before kernel_entry; " + ptx.EnvDir + "?)", nil
		}
	}
	return "", nil
}

// undo releases what a failed New acquired: the staging and LL areas, the
// modules and the status streams.
func (c *Comm) undo() error {
	var errs []error
	if c.llHeld {
		errs = append(errs, c.t.Free(c.ll))
		c.llHeld = false
	}
	if c.stageHeld {
		errs = append(errs, c.t.Free(c.stage))
		c.stageHeld = false
	}
	if c.ringHeld {
		errs = append(errs, c.t.Free(c.ring))
		c.ringHeld = false
	}
	errs = append(errs, c.release())
	return errors.Join(errs...)
}

// gridLimit is the largest grid for a team whose devices have at least sm
// multiprocessors (0: unknown) and hold at most share ranks each: every
// rank's blocks must be resident at once (the kernels wait on each other),
// so a device shared by share ranks gives each sm/share blocks (at least
// 1). An explicit grid (option or environment) above that is clamped, and
// cfg.gridSrc says so; the default's source says how it was computed.
func gridLimit(cfg *config, sm, share int) int {
	share = max(share, 1)
	limit := kabi.MaxBlocks
	if sm > 0 {
		limit = min(limit, max(sm/share, 1))
	} else if share > 1 {
		limit = max(limit/share, 1)
	}
	g := min(cfg.maxGrid, limit)
	explicit := cfg.gridSrc != gridSrcDefault
	switch {
	case !explicit && share > 1:
		cfg.gridSrc = fmt.Sprintf("default (SM count %d / %d ranks per device, so that every rank's blocks are resident at once)", sm, share)
	case explicit && g < cfg.maxGrid && share > 1:
		cfg.gridSrc += fmt.Sprintf(" (clamped from %d to %d: %d ranks share a device of %d SMs, and every rank's blocks must be resident at once)", cfg.maxGrid, g, share, sm)
	case explicit && g < cfg.maxGrid:
		cfg.gridSrc += fmt.Sprintf(" (clamped from %d to %d, the SM count)", cfg.maxGrid, g)
	}
	return max(g, 1)
}

// setupLL allocates the LL area when LL is on and every local rank's
// module has the LL kernels. PTX generated before them turns LL off (with
// a warning): the other algorithms take every size. New zeroes the area
// once the ranks agreed.
func (c *Comm) setupLL() error {
	c.ptxLL = true
	noLL := -1
	for _, rs := range c.ranks {
		if !rs.mod.HasLL() {
			c.ptxLL, noLL = false, rs.rank
			break
		}
	}
	c.llMax = c.cfg.llMax
	if c.llMax == 0 {
		return nil
	}
	if !c.ptxLL {
		c.t.Logger().Warn("collectives: the loaded PTX has no LL all-reduce kernels (generated before them; regenerate it): LL off",
			"rank", noLL, "ll_max_from", c.cfg.llSrc)
		c.llMax = 0
		return nil
	}
	// The area is 4 x ranks x the payload (rounded up to lines).
	if c.llMax > c.t.DataSize()/(4*uint64(c.size)) {
		return fmt.Errorf("collectives: %w: New: the LL area for all-reduces up to %d bytes (%s) needs 4 x %d ranks x that per rank, more than the team's %d-byte data area (team.WithWorkspaceSize; or lower WithLLMax / NVLS_LL_MAX, 0 turns LL off)", ErrInvalid, c.llMax, c.cfg.llSrc, c.size, c.t.DataSize())
	}
	// The two-step broadcast's slices may want more lines a slot. Its
	// default limit gives way to a workspace that cannot hold them: the
	// broadcast then runs two LL steps as far as the LL limit's lines go.
	base := linesOf(c.llMax)
	c.llLines = llAreaLines(c.cfg, c.size)
	per := 2 * uint64(c.size) * kabi.LLLineBytes
	bcastSrc := sourceName(uint8(c.cfg.llTwoBcastFrom), "WithLLTwoBcastMax", EnvLLTwoBcastMax)
	if c.llLines > base && c.cfg.llTwoBcastFrom != fromDefault && c.llLines > c.t.DataSize()/per {
		return fmt.Errorf("collectives: %w: New: the LL area for broadcasts in two LL steps up to %d bytes (%s) needs 2 x %d ranks x %d lines of %d bytes per rank, more than the team's %d-byte data area (team.WithWorkspaceSize; or lower WithLLTwoBcastMax / NVLS_LL_TWO_BCAST_MAX, 0 never)", ErrInvalid, c.cfg.llTwoBcastMax, bcastSrc, c.size, c.llLines, kabi.LLLineBytes, c.t.DataSize())
	}
	if c.llLines > math.MaxUint32 {
		return fmt.Errorf("collectives: %w: New: the LL area's %d lines a slot (LL max %d bytes, %s; two-step broadcast max %d bytes, %s): at most %d", ErrInvalid, c.llLines, c.llMax, c.cfg.llSrc, c.cfg.llTwoBcastMax, bcastSrc, uint64(math.MaxUint32))
	}
	var err error
	if c.llLines <= c.t.DataSize()/per {
		c.ll, err = c.t.Alloc(c.llLines * per)
	} else {
		err = team.ErrNoSpace
	}
	if c.llLines > base && c.cfg.llTwoBcastFrom == fromDefault && errors.Is(err, team.ErrNoSpace) {
		c.t.Logger().Info("collectives: the workspace has no room for the two-step LL broadcast's area: broadcasts run two LL steps only as far as the LL limit's area holds (team.WithWorkspaceSize: size it with WorkspaceBytes)",
			"ll_two_bcast_max", c.cfg.llTwoBcastMax, "area_bytes", c.llLines*per, "data_bytes", c.t.DataSize())
		c.llLines = base
		c.ll, err = c.t.Alloc(c.llLines * per)
	}
	c.llBytes = c.llLines * per
	if err != nil {
		return fmt.Errorf("collectives: New: allocating the LL area (%d bytes for all-reduces up to %d bytes, %s, and broadcasts in two LL steps up to %d, %s; lower them or turn LL off with 0) from the team's workspace: %w", c.llBytes, c.llMax, c.cfg.llSrc, c.cfg.llTwoBcastMax, bcastSrc, err)
	}
	c.llHeld = true
	c.llOff = c.lay.At(c.ll.Offset())
	return nil
}

// zeroLL zeroes rank rs's LL area and meets the other ranks in a device
// barrier, on the rank's status stream (on its worker).
func (c *Comm) zeroLL(rs *rankState) error {
	if err := c.d.MemsetD8Async(cuda.DevicePtr(rs.own+c.llOff), 0, c.llBytes, rs.statusStream); err != nil {
		return fmt.Errorf("rank %d (device %d): zeroing the LL area: %w", rs.rank, rs.dev, err)
	}
	p := rs.base
	p.Opcode = kernels.OpBarrier
	p.Check = kabi.CheckArgs(kernels.OpBarrier, 0, 0, 0)
	cfg := cuda.LaunchConfig{Grid: cuda.D1(1), Block: cuda.D1(barrierBlock), Stream: rs.statusStream}
	if err := c.launch(rs.mod.Barrier(), cfg, unsafe.Pointer(&p)); err != nil {
		return fmt.Errorf("rank %d (device %d): barrier after zeroing the LL area: %w", rs.rank, rs.dev, err)
	}
	if err := c.d.StreamSynchronize(rs.statusStream); err != nil {
		return fmt.Errorf("rank %d (device %d): barrier after zeroing the LL area: %w", rs.rank, rs.dev, err)
	}
	if word := atomic.LoadUint64(rs.hostStatus); word != 0 {
		err := statusError(rs.rank, rs.dev, word, c.cfg.deadline, rs.diag(c.size))
		c.tl.Fail(err)
		return err
	}
	return nil
}

// hostStatusBytes is the mapped host memory of one rank's status word and,
// at kabi.HostDiagOffset, the arrival words a mismatch leaves (two
// cache lines of its own; the driver pins whole pages anyway).
const hostStatusBytes = kabi.HostDiagOffset + 8*kabi.MaxRanks

// diag is the arrival words of the n ranks that a kernel recording
// StatusMismatch left in the host status area (written before the status
// word, which the caller has read).
func (rs *rankState) diag(n int) []uint64 {
	w := make([]uint64, n)
	for r := range w {
		w[r] = atomic.LoadUint64((*uint64)(unsafe.Add(rs.hostMem, kabi.HostDiagOffset+8*r)))
	}
	return w
}

// setupRank runs on rank rs's worker: load the modules, create the
// status stream and allocate the status word in mapped host memory
// (portable: pinned for every context; zeroed, as cuMemHostAlloc's memory
// may not be).
func (c *Comm) setupRank(rs *rankState) error {
	m, err := kabi.Load(c.d, c.flavor)
	if err != nil {
		return fmt.Errorf("rank %d (device %d): %w", rs.rank, rs.dev, err)
	}
	rs.mod = m
	if c.flavor == kernels.Multicast {
		if rs.ucMod, err = kabi.Load(c.d, kernels.Unicast); err != nil {
			return fmt.Errorf("rank %d (device %d): the unicast kernels beside the multicast ones: %w", rs.rank, rs.dev, err)
		}
	}
	s, err := c.d.StreamCreate(cuda.StreamNonBlocking)
	if err != nil {
		return fmt.Errorf("rank %d (device %d): creating the status stream: %w", rs.rank, rs.dev, err)
	}
	rs.statusStream = s
	if c.usesCE() {
		if rs.side, err = c.d.StreamCreate(cuda.StreamNonBlocking); err != nil {
			return fmt.Errorf("rank %d (device %d): creating the copy-engine side stream: %w", rs.rank, rs.dev, err)
		}
		if rs.fork, err = c.d.EventCreate(cuda.EventDisableTiming); err != nil {
			return fmt.Errorf("rank %d (device %d): creating the copy-engine fork event: %w", rs.rank, rs.dev, err)
		}
		if rs.join, err = c.d.EventCreate(cuda.EventDisableTiming); err != nil {
			return fmt.Errorf("rank %d (device %d): creating the copy-engine join event: %w", rs.rank, rs.dev, err)
		}
	}
	h, err := c.d.MemHostAlloc(hostStatusBytes, cuda.MemHostAllocPortable|cuda.MemHostAllocDeviceMap)
	if err != nil {
		return fmt.Errorf("rank %d (device %d): allocating its status word in mapped host memory: %w", rs.rank, rs.dev, err)
	}
	rs.hostMem, rs.hostStatus = h, (*uint64)(h)
	for o := 0; o < hostStatusBytes; o += 8 {
		atomic.StoreUint64((*uint64)(unsafe.Add(h, o)), 0)
	}
	d, err := c.d.MemHostGetDevicePointer(h, 0)
	if err != nil {
		return fmt.Errorf("rank %d (device %d): the device address of its status word: %w", rs.rank, rs.dev, err)
	}
	rs.base.HostStatus = uint64(d)
	return nil
}

// Flavor is the kernels' flavor: multicast iff the team's transport is.
func (c *Comm) Flavor() kernels.Flavor { return c.flavor }

// Team is the team c runs on.
func (c *Comm) Team() *team.Team { return c.t }

// LLMax is the largest all-reduce, in bytes, that runs the LL kernel (0:
// LL is off, by the options or because the loaded PTX has no LL kernels).
func (c *Comm) LLMax() uint64 { return c.llMax }

// OneShotMax is the largest all-reduce, in bytes, that runs one-shot
// (those up to LLMax run LL).
func (c *Comm) OneShotMax() uint64 { return c.cfg.oneShotMax }

// MaxGrid is the largest grid a kernel is launched with.
func (c *Comm) MaxGrid() int { return int(c.maxGrid) }

// MinGrid is the grid a launch spreads its vectors over, one a thread,
// before its threads take more (WithMinGrid).
func (c *Comm) MinGrid() int { return int(c.minGrid) }

// StageBytes is the size of each staging area: copies in and out, and the
// in-place one-shot all-reduce, go in chunks of it.
func (c *Comm) StageBytes() uint64 { return c.stageBytes }

// Err returns the team's fatal error (see Sync), or nil.
func (c *Comm) Err() error { return c.t.Err() }

// Close unloads the modules, destroys the status streams, frees the
// staging areas and the status words; it works on a broken team too.
// Close the Comm before its team, once nothing of it runs on the streams
// any more (Sync first): a stream of a rank's last launch (a collective,
// or a Graph.Launch of a graph holding this Comm's collectives) that no
// Sync found idle is waited for (as long as Sync would by default) before that
// rank's status word, which its kernels may still write, is freed. A
// second Close returns nil.
func (c *Comm) Close() error {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.closed {
		return nil
	}
	c.closed = true
	unregister(c)
	err := c.t.Free(c.stage)
	if err == nil {
		c.stageHeld = false
		if c.llHeld {
			err = c.t.Free(c.ll)
			c.llHeld = err != nil
		}
		if err == nil && c.ringHeld {
			err = c.t.Free(c.ring)
			c.ringHeld = err != nil
		}
	}
	if err != nil {
		if errors.Is(err, team.ErrClosed) {
			return fmt.Errorf("collectives: Close: the team was closed before the Comm (releasing its contexts destroyed the Comm's modules and streams with them): %w", err)
		}
		return errors.Join(fmt.Errorf("collectives: Close: freeing the staging and LL areas and the ring's FIFO: %w", err), c.release())
	}
	return c.release()
}

// perThreadStream is CU_STREAM_PER_THREAD, the calling thread's default
// stream.
const perThreadStream cuda.Stream = 2

// awaitLaunched waits (rs's context current) for the stream of the rank's
// last launch, when no Sync found it idle since: its kernels may still
// run, and write the status word (a failure drains in about one timeout).
// It waits as long as Sync would by default; the error says the stream is
// still busy then. The per-thread default stream (2) is the worker's, not
// this thread's: not waited for.
func (c *Comm) awaitLaunched(rs *rankState) error {
	if !rs.inflight || rs.lastStream == perThreadStream {
		return nil
	}
	limit := c.cfg.timeout + min(c.cfg.timeout, syncGrace)
	p := pacer{start: time.Now()}
	for {
		if done, _ := c.query(rs.lastStream); done {
			break
		}
		if time.Since(p.start) > limit {
			return fmt.Errorf("collectives: Close: rank %d (device %d): stream %#x still had work after %v: its status word (%d bytes of mapped host memory) stays allocated, since the kernels still queued may write it (Sync before Close)",
				rs.rank, rs.dev, uint64(rs.lastStream), roundWait(time.Since(p.start)), hostStatusBytes)
		}
		p.pause()
	}
	rs.inflight = false
	return nil
}

// release unloads every rank's modules and destroys its status stream, on
// goroutines locked to their threads with the rank's context current (not
// through team.Run, which refuses work on a broken team).
func (c *Comm) release() error {
	errs := make([]error, len(c.ranks))
	var wg sync.WaitGroup
	for i, rs := range c.ranks {
		if rs.mod == nil && rs.ucMod == nil && rs.statusStream == 0 && rs.hostMem == nil && rs.side == 0 && rs.fork == 0 && rs.join == 0 {
			continue
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = c.releaseRank(rs)
		}()
	}
	wg.Wait()
	return errors.Join(errs...)
}

func (c *Comm) releaseRank(rs *rankState) error {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if err := c.d.CtxSetCurrent(rs.ctx); err != nil {
		return fmt.Errorf("collectives: rank %d (device %d): making its context current: %w", rs.rank, rs.dev, err)
	}
	var errs []error
	busy := c.awaitLaunched(rs)
	if rs.mod != nil {
		if err := rs.mod.Close(); err != nil {
			errs = append(errs, fmt.Errorf("collectives: rank %d (device %d): %w", rs.rank, rs.dev, err))
		}
		rs.mod = nil
	}
	if rs.ucMod != nil {
		if err := rs.ucMod.Close(); err != nil {
			errs = append(errs, fmt.Errorf("collectives: rank %d (device %d): %w", rs.rank, rs.dev, err))
		}
		rs.ucMod = nil
	}
	if rs.statusStream != 0 {
		if err := c.d.StreamDestroy(rs.statusStream); err != nil {
			errs = append(errs, fmt.Errorf("collectives: rank %d (device %d): destroying the status stream: %w", rs.rank, rs.dev, err))
		}
		rs.statusStream = 0
	}
	if rs.side != 0 {
		if err := c.d.StreamDestroy(rs.side); err != nil {
			errs = append(errs, fmt.Errorf("collectives: rank %d (device %d): destroying the copy-engine side stream: %w", rs.rank, rs.dev, err))
		}
		rs.side = 0
	}
	for _, e := range []*cuda.Event{&rs.fork, &rs.join} {
		if *e != 0 {
			if err := c.d.EventDestroy(*e); err != nil {
				errs = append(errs, fmt.Errorf("collectives: rank %d (device %d): destroying a copy-engine event: %w", rs.rank, rs.dev, err))
			}
			*e = 0
		}
	}
	switch {
	case busy != nil:
		errs = append(errs, busy)
	case rs.hostMem != nil:
		if err := c.d.MemFreeHost(rs.hostMem); err != nil {
			errs = append(errs, fmt.Errorf("collectives: rank %d (device %d): freeing its status word (mapped host memory): %w", rs.rank, rs.dev, err))
		} else {
			rs.hostMem, rs.hostStatus = nil, nil
		}
	}
	if err := c.d.CtxSetCurrent(0); err != nil {
		errs = append(errs, fmt.Errorf("collectives: rank %d (device %d): clearing the current context: %w", rs.rank, rs.dev, err))
	}
	return errors.Join(errs...)
}
