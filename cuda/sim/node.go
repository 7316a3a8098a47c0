package sim

import (
	"fmt"
	"sync"
	"sync/atomic"
	"time"

	"github.com/nvls-go/nvls/cuda"
	"github.com/nvls-go/nvls/internal/osthread"
)

// Node is a simulated NVSwitch node. It implements cuda.Driver and is safe
// for use from many goroutines at once. Close stops its stream goroutines.
type Node struct {
	cfg   Config
	start time.Time

	inited atomic.Bool

	// mu guards the control-plane state below (everything but memory
	// contents, stream queues and the call log).
	mu sync.Mutex

	nextID uint64

	ctxs    []*context
	current sync.Map // osthread.ID of an OS thread (int) -> *context

	// Virtual address space.
	nextVA       uint64
	reservations []*reservation // sorted by start
	mappings     []*mapping     // sorted by start; published to snap
	snap         atomic.Pointer[[]*mapping]

	handles  map[cuda.MemHandle]*handle
	allocs   map[uint64]*physAlloc // live physical allocations by id
	memAlloc map[cuda.DevicePtr]*memAllocation
	// hostAllocs are the cuMemHostAlloc allocations by host address.
	hostAllocs map[uintptr]*hostAlloc
	used       []uint64 // device bytes in use, by device
	mcLive     int

	exports map[[2]uint64]*export // POSIX FD exports by (st_dev, st_ino)
	fabric  map[uint64]*export    // fabric exports by id
	seq     atomic.Uint64

	streams map[cuda.Stream]*stream
	events  map[cuda.Event]*event
	modules map[cuda.Module]*module
	funcs   map[cuda.Function]*function
	graphs  map[cuda.Graph]*graph
	execs   map[cuda.GraphExec]*graphExec

	// Call log and fault injection.
	logMu      sync.Mutex
	log        []Call
	logDropped int
	perOp      map[string]int
	nCalls     int
	faults     []fault

	closed atomic.Bool
	// done is closed by Close: calls that wait (a multicast bind or map
	// before every device is added) give up.
	done chan struct{}
	// clique is each device's NVLink clique (Config.Cliques).
	clique []int
}

var _ cuda.Driver = (*Node)(nil)

// New returns a simulated node configured by cfg (zero fields take their
// defaults, see Config). It panics on a configuration that cannot describe
// a node (a granularity that is not a power of two, a device out of range),
// which is a programming error in the test that wrote it.
func New(cfg Config) *Node {
	cfg = cfg.withDefaults()
	if err := cfg.validate(); err != nil {
		panic(err)
	}
	n := &Node{
		cfg:        cfg,
		start:      time.Now(),
		nextID:     0x1000,
		nextVA:     vaBase,
		handles:    map[cuda.MemHandle]*handle{},
		allocs:     map[uint64]*physAlloc{},
		memAlloc:   map[cuda.DevicePtr]*memAllocation{},
		hostAllocs: map[uintptr]*hostAlloc{},
		used:       make([]uint64, cfg.Devices),
		exports:    map[[2]uint64]*export{},
		fabric:     map[uint64]*export{},
		streams:    map[cuda.Stream]*stream{},
		events:     map[cuda.Event]*event{},
		modules:    map[cuda.Module]*module{},
		funcs:      map[cuda.Function]*function{},
		graphs:     map[cuda.Graph]*graph{},
		execs:      map[cuda.GraphExec]*graphExec{},
		perOp:      map[string]int{},
		done:       make(chan struct{}),
		clique:     make([]int, cfg.Devices),
	}
	for k, cl := range cfg.Cliques {
		for _, d := range cl {
			n.clique[d] = k
		}
	}
	empty := []*mapping{}
	n.snap.Store(&empty)
	for d := 0; d < cfg.Devices; d++ {
		n.ctxs = append(n.ctxs, &context{node: n, dev: cuda.Device(d), handle: cuda.Context(0xC000_0000 + uint64(d)*0x1000)})
	}
	return n
}

// Config returns the node's configuration with defaults filled in.
func (n *Node) Config() Config { return n.cfg }

// Close stops every stream goroutine. The node must not be used after.
// It returns CheckNoLeaks's error (matching ErrLeak) when the callers
// left resources, so that a leak is not silent where only Close is
// checked; the streams are stopped all the same. A second Close returns
// nil.
func (n *Node) Close() error {
	if n.closed.Swap(true) {
		return nil
	}
	// Before the streams go: they count among the leaks.
	leaked := n.CheckNoLeaks()
	close(n.done)
	n.mu.Lock()
	var all []*stream
	for _, s := range n.streams {
		all = append(all, s)
	}
	for _, c := range n.ctxs {
		if c.legacy != nil {
			all = append(all, c.legacy)
			c.legacy = nil
		}
	}
	n.streams = map[cuda.Stream]*stream{}
	n.mu.Unlock()
	for _, s := range all {
		s.stop()
	}
	return leaked
}

func (n *Node) newID() uint64 {
	n.nextID++
	return n.nextID
}

// errf builds the *cuda.Error a failing call returns.
func errf(op string, code cuda.Result, format string, args ...any) error {
	return cuda.NewError(op, code, fmt.Sprintf(format, args...))
}

// Name is "sim".
func (n *Node) Name() string { return "sim" }

// Init is cuInit.
func (n *Node) Init() error {
	return n.call("cuInit", -1, 0, 0, 0).do(func(*call) error {
		n.inited.Store(true)
		return nil
	})
}

// DriverVersion is cuDriverGetVersion.
func (n *Node) DriverVersion() (int, error) {
	return get(n.call("cuDriverGetVersion", -1, 0, 0, 0), func(c *call) (int, error) {
		return n.cfg.DriverVersion, nil
	})
}

// DeviceCount is cuDeviceGetCount.
func (n *Node) DeviceCount() (int, error) {
	return get(n.call("cuDeviceGetCount", -1, 0, 0, 0), func(c *call) (int, error) {
		return n.cfg.Devices, nil
	})
}

func (n *Node) validDevice(d cuda.Device) bool { return d >= 0 && int(d) < n.cfg.Devices }

func (n *Node) checkDevice(op string, d cuda.Device) error {
	if !n.validDevice(d) {
		return errf(op, cuda.ErrorInvalidDevice, "device %d does not exist (node has %d devices)", d, n.cfg.Devices)
	}
	return nil
}

// DeviceGet is cuDeviceGet.
func (n *Node) DeviceGet(ordinal int) (cuda.Device, error) {
	return get(n.call("cuDeviceGet", ordinal, 0, 0, 0), func(c *call) (cuda.Device, error) {
		if err := c.checkDevice(cuda.Device(ordinal)); err != nil {
			return 0, err
		}
		return cuda.Device(ordinal), nil
	})
}

// DeviceName is cuDeviceGetName.
func (n *Node) DeviceName(d cuda.Device) (string, error) {
	return get(n.call("cuDeviceGetName", int(d), 0, 0, 0), func(c *call) (string, error) {
		if err := c.checkDevice(d); err != nil {
			return "", err
		}
		return n.cfg.DeviceName, nil
	})
}

func (n *Node) multicastSupported(d cuda.Device) bool {
	if n.cfg.MulticastAllOff {
		return false
	}
	for _, x := range n.cfg.NoMulticast {
		if x == int(d) {
			return false
		}
	}
	return true
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// DeviceAttribute is cuDeviceGetAttribute. Attributes the simulator does
// not model return CUDA_ERROR_INVALID_VALUE.
func (n *Node) DeviceAttribute(attr cuda.DeviceAttribute, d cuda.Device) (int, error) {
	return get(n.call("cuDeviceGetAttribute", int(d), uint64(attr), 0, 0), func(c *call) (int, error) {
		if err := c.checkDevice(d); err != nil {
			return 0, err
		}
		switch attr {
		case cuda.AttrMaxThreadsPerBlock:
			return 1024, nil
		case cuda.AttrMultiprocessorCount:
			return n.cfg.SMCount, nil
		case cuda.AttrClockRate:
			return 1980000, nil
		case cuda.AttrMemoryClockRate:
			return 2619000, nil
		case cuda.AttrGlobalMemoryBusWidth:
			return 6144, nil
		case cuda.AttrL2CacheSize:
			return 50 << 20, nil
		case cuda.AttrUnifiedAddressing, cuda.AttrManagedMemory:
			return 1, nil
		case cuda.AttrPCIBusID:
			return pciBus(d), nil
		case cuda.AttrPCIDeviceID, cuda.AttrPCIDomainID:
			return 0, nil
		case cuda.AttrComputeCapabilityMajor:
			return 9, nil
		case cuda.AttrComputeCapabilityMinor:
			return 0, nil
		case cuda.AttrVirtualMemoryManagement:
			return b2i(!n.cfg.NoVMM), nil
		case cuda.AttrHandleTypePosixFDSupported:
			return b2i(!n.cfg.NoPosixFD), nil
		case cuda.AttrGenericCompressionSupported:
			return b2i(n.cfg.Compression), nil
		case cuda.AttrGPUDirectRDMAWithVMM:
			return 0, nil
		case cuda.AttrHandleTypeFabricSupported:
			return b2i(n.cfg.Fabric), nil
		case cuda.AttrMulticastSupported:
			return b2i(n.multicastSupported(d)), nil
		}
		return 0, c.errf(cuda.ErrorInvalidValue, "attribute %d is not modelled by the simulator", attr)
	})
}

func pciBus(d cuda.Device) int { return 0x18 + 0x10*int(d) }

// DeviceTotalMem is cuDeviceTotalMem.
func (n *Node) DeviceTotalMem(d cuda.Device) (uint64, error) {
	return get(n.call("cuDeviceTotalMem", int(d), 0, 0, 0), func(c *call) (uint64, error) {
		if err := c.checkDevice(d); err != nil {
			return 0, err
		}
		return n.cfg.MemoryPerDevice, nil
	})
}

func (n *Node) peerOK(a, b cuda.Device) bool {
	if a == b {
		return true
	}
	for _, p := range n.cfg.NoPeer {
		if (p[0] == int(a) && p[1] == int(b)) || (p[0] == int(b) && p[1] == int(a)) {
			return false
		}
	}
	return true
}

// DeviceCanAccessPeer is cuDeviceCanAccessPeer: false for d == peer, as
// the driver answers.
func (n *Node) DeviceCanAccessPeer(d, peer cuda.Device) (bool, error) {
	return get(n.call("cuDeviceCanAccessPeer", int(d), uint64(peer), 0, 0), func(c *call) (bool, error) {
		if err := c.checkDevice(d); err != nil {
			return false, err
		}
		if err := c.checkDevice(peer); err != nil {
			return false, err
		}
		return d != peer && n.peerOK(d, peer), nil
	})
}

// DevicePCIBusID is cuDeviceGetPCIBusId.
func (n *Node) DevicePCIBusID(d cuda.Device) (string, error) {
	return get(n.call("cuDeviceGetPCIBusId", int(d), 0, 0, 0), func(c *call) (string, error) {
		if err := c.checkDevice(d); err != nil {
			return "", err
		}
		return fmt.Sprintf("0000:%02X:00.0", pciBus(d)), nil
	})
}

// context is a device's primary context.
type context struct {
	node   *Node
	dev    cuda.Device
	handle cuda.Context
	refs   int // guarded by node.mu
	// sticky is the fault that broke the context, nil while it is fine.
	sticky atomic.Pointer[cuda.Error]
	legacy *stream // the legacy default stream, created on first use
}

func (c *context) fault(err error) {
	// An illegal access anywhere in the error chain is an illegal address;
	// any other kernel error stands for a failed launch.
	code := cuda.ErrorLaunchFailed
	if errIsIllegal(err) {
		code = cuda.ErrorIllegalAddress
	}
	c.sticky.CompareAndSwap(nil, cuda.NewError("", code, fmt.Sprintf("device %d: %v", c.dev, err)))
}

// stickyErr returns the context's sticky error as the error of op.
func (c *context) stickyErr(op string) error {
	if e := c.sticky.Load(); e != nil {
		return cuda.NewError(op, e.Code, e.Detail)
	}
	return nil
}

func (n *Node) ctxByHandle(h cuda.Context) *context {
	for _, c := range n.ctxs {
		if c.handle == h {
			return c
		}
	}
	return nil
}

// PrimaryCtxRetain is cuDevicePrimaryCtxRetain.
func (n *Node) PrimaryCtxRetain(d cuda.Device) (cuda.Context, error) {
	return get(n.call("cuDevicePrimaryCtxRetain", int(d), 0, 0, 0), func(c *call) (cuda.Context, error) {
		if err := c.checkDevice(d); err != nil {
			return 0, err
		}
		n.mu.Lock()
		defer n.mu.Unlock()
		ctx := n.ctxs[d]
		ctx.refs++
		return ctx.handle, nil
	})
}

// PrimaryCtxRelease is cuDevicePrimaryCtxRelease. Releasing the last
// reference resets the context: its streams, events and modules are
// destroyed, its cuMemAlloc memory is freed and a sticky fault is cleared.
func (n *Node) PrimaryCtxRelease(d cuda.Device) error {
	return n.call("cuDevicePrimaryCtxRelease", int(d), 0, 0, 0).do(func(c *call) error {
		if err := c.checkDevice(d); err != nil {
			return err
		}
		n.mu.Lock()
		ctx := n.ctxs[d]
		if ctx.refs == 0 {
			n.mu.Unlock()
			return c.errf(cuda.ErrorInvalidContext, "primary context of device %d is not retained", d)
		}
		ctx.refs--
		if ctx.refs > 0 {
			n.mu.Unlock()
			return nil
		}
		stop := n.resetContextLocked(ctx)
		n.mu.Unlock()
		for _, s := range stop {
			s.stop()
		}
		return nil
	})
}

// resetContextLocked destroys what belongs to ctx; it returns the streams
// whose goroutines the caller stops once n.mu is released.
func (n *Node) resetContextLocked(ctx *context) []*stream {
	var stop []*stream
	for h, s := range n.streams {
		if s.ctx == ctx {
			delete(n.streams, h)
			stop = append(stop, s)
		}
	}
	if ctx.legacy != nil {
		stop = append(stop, ctx.legacy)
		ctx.legacy = nil
	}
	for h, e := range n.events {
		if e.ctx == ctx {
			delete(n.events, h)
		}
	}
	for h, m := range n.modules {
		if m.ctx == ctx {
			n.unloadModuleLocked(h, m)
		}
	}
	for p, a := range n.memAlloc {
		if a.ctx == ctx {
			n.freeMemAllocLocked(p, a)
		}
	}
	n.freeHostAllocsLocked(ctx)
	ctx.sticky.Store(nil)
	return stop
}

// CtxSetCurrent is cuCtxSetCurrent: it binds h to the calling OS thread
// (callers lock their goroutine to its thread, as with the real driver).
// A zero h unbinds.
func (n *Node) CtxSetCurrent(h cuda.Context) error {
	return n.call("cuCtxSetCurrent", -1, uint64(h), 0, 0).do(func(c *call) error {
		tid := osthread.ID()
		if h == 0 {
			n.current.Delete(tid)
			return nil
		}
		ctx := n.ctxByHandle(h)
		if ctx == nil {
			return c.errf(cuda.ErrorInvalidContext, "%#x is not a context of this node", uint64(h))
		}
		n.mu.Lock()
		live := ctx.refs > 0
		n.mu.Unlock()
		if !live {
			return c.errf(cuda.ErrorInvalidContext, "primary context of device %d is not retained", ctx.dev)
		}
		n.current.Store(tid, ctx)
		return nil
	})
}

// CtxGetCurrent is cuCtxGetCurrent: 0 when none is current.
func (n *Node) CtxGetCurrent() (cuda.Context, error) {
	return get(n.call("cuCtxGetCurrent", -1, 0, 0, 0), func(c *call) (cuda.Context, error) {
		if v, ok := n.current.Load(osthread.ID()); ok {
			return v.(*context).handle, nil
		}
		return 0, nil
	})
}

// cur returns the calling thread's current context, or the error op
// returns without one (or when it was released since).
func (n *Node) cur(op string) (*context, error) {
	v, ok := n.current.Load(osthread.ID())
	if !ok {
		return nil, errf(op, cuda.ErrorInvalidContext, "no current context on this OS thread (lock the goroutine to its thread and call cuCtxSetCurrent)")
	}
	ctx := v.(*context)
	n.mu.Lock()
	live := ctx.refs > 0
	n.mu.Unlock()
	if !live {
		return nil, errf(op, cuda.ErrorInvalidContext, "the current context (device %d) was released", ctx.dev)
	}
	return ctx, nil
}

// CtxSynchronize is cuCtxSynchronize: it waits for every stream of the
// current context.
func (n *Node) CtxSynchronize() error {
	return n.ctxCall("cuCtxSynchronize", 0, 0, 0).do(func(c *call) error {
		ctx := c.ctx
		if err := n.refuseUnsafe(c.op); err != nil {
			return err
		}
		n.mu.Lock()
		var all []*stream
		for _, s := range n.streams {
			if s.ctx == ctx {
				all = append(all, s)
			}
		}
		if ctx.legacy != nil {
			all = append(all, ctx.legacy)
		}
		n.mu.Unlock()
		for _, s := range all {
			if s.capturing() {
				return c.errf(cuda.ErrorCaptureUnsupported, "stream %#x is capturing", uint64(s.handle))
			}
		}
		for _, s := range all {
			s.wait(s.enqueued())
		}
		return ctx.stickyErr(c.op)
	})
}
