package team

import (
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"syscall"

	"github.com/nvls-go/nvls/cuda"
	"github.com/nvls-go/nvls/kernels"
	"github.com/nvls-go/nvls/multicast"
	"github.com/nvls-go/nvls/vmm"
)

// Setup steps, as error messages and log lines name them.
const (
	stepStart       = "start"
	stepQuery       = "query device"
	stepPeers       = "check peer access"
	stepMCGran      = "query multicast granularity"
	stepMCCreate    = "create multicast object"
	stepMCShare     = "share multicast object"
	stepMCAdd       = "add device to multicast object"
	stepMemCreate   = "create workspace memory"
	stepMCBind      = "bind multicast memory"
	stepMCMap       = "map multicast object"
	stepMapOwn      = "map workspace"
	stepZero        = "zero signal area"
	stepShareMem    = "share workspace handles"
	stepMapPeers    = "map peer workspaces"
	stepMCUnwind    = "undo multicast for the unicast fallback"
	stepTeardown    = "teardown"
	stepWorkerStart = "start device worker"
)

// ErrPeerFailed matches the error a rank returns when another rank's
// setup step failed (*PeerError).
var ErrPeerFailed = errors.New("team: another rank failed")

// PeerError is what a rank returns when its own steps went fine but
// another rank's failed: all ranks stop at the same step and unwind.
type PeerError struct {
	Rank int
	Step string
	Msg  string
}

func (e *PeerError) Error() string {
	return fmt.Sprintf("team: rank %d failed at step %q: %s", e.Rank, e.Step, e.Msg)
}

// Unwrap makes errors.Is(err, ErrPeerFailed) hold.
func (e *PeerError) Unwrap() error { return ErrPeerFailed }

// peerMap is another rank's workspace mapped on this rank's device.
type peerMap struct {
	alloc *vmm.Allocation // imported (multi-process), nil in-process
	res   *vmm.Reservation
	m     *vmm.Mapping
}

// rankState is one local rank: its device, worker and resources.
type rankState struct {
	rank int
	dev  cuda.Device
	w    *worker
	tick uint64 // Run's ticket for the job in flight on w
	cctx cuda.Context
	boot Bootstrap
	d    cuda.Driver
	log  *slog.Logger

	own    *vmm.Allocation
	ownRes *vmm.Reservation
	ownMap *vmm.Mapping
	peers  []peerMap

	mc      *multicast.Object
	mcBound bool
	mcBytes uint64 // the size of the bind, while bound
	mcBase  cuda.DevicePtr

	ucBase [kernels.MaxRanks]cuda.DevicePtr
}

// holds reports whether the rank still holds a driver resource.
func (r *rankState) holds() bool {
	if r.mc != nil || r.own != nil || r.ownRes != nil || r.ownMap != nil {
		return true
	}
	for _, p := range r.peers {
		if p.alloc != nil || p.res != nil || p.m != nil {
			return true
		}
	}
	return false
}

// shared is what every rank of a team agrees on.
type shared struct {
	size      int
	transport Transport
	reason    string
	handles   cuda.HandleType
	smCount   int
	gran      uint64 // the workspace's granularity (allocation, and multicast)
	wsBytes   uint64 // S: signal + data + padding
	dataBytes uint64
	// fallback is the multicast failure that made an auto team fall back
	// to unicast, nil when none did.
	fallback *FabricError
	// onDevice is, per rank, how many ranks run on its device.
	onDevice []int
}

// bringup is one rank's bring-up, run on the rank's worker.
type bringup struct {
	ctx context.Context
	cfg resolved
	r   *rankState
	sh  shared
	dec decision
	// auto: the transport was chosen automatically, so a FabricError
	// makes the team fall back to unicast instead of failing.
	auto bool
	// logFallback: this rank writes the fallback's WARN line (one local
	// rank per process).
	logFallback bool
	// byValue: every rank is a rank of this one Team (New), so handles
	// travel by value and Close orders the teardown across ranks. Ranks
	// brought up one by one (NewRank) close independently, even in one
	// process: they export and import POSIX FDs, each holding its own
	// reference (a rank that attached to rank 0's multicast handle by
	// value could not unbind once rank 0 had closed).
	byValue bool
}

func (b *bringup) fail(step string, err error) error {
	return fmt.Errorf("team: rank %d (device %d): %s: %w", b.r.rank, b.r.dev, step, err)
}

// exchange all-gathers this rank's outcome of a step with a payload; when
// any rank failed, every rank returns an error (its own, or a PeerError
// naming the first rank that failed).
func exchange(ctx context.Context, boot Bootstrap, step string, local error, payload []byte) ([][]byte, error) {
	out, _, err := exchangeFB(ctx, boot, step, local, payload, false)
	return out, err
}

// agree is exchange with no payload.
func (b *bringup) agree(step string, local error) error {
	_, err := exchange(b.ctx, b.r.boot, step, local, nil)
	return err
}

// failEarly takes part in the first exchange with an error, for a rank
// that cannot even start, so that the others stop instead of waiting.
func failEarly(ctx context.Context, boot Bootstrap, err error) error {
	_, xerr := exchange(ctx, boot, stepQuery, err, nil)
	return xerr
}

func (b *bringup) info(step string, args ...any) {
	b.r.log.Info("team: "+step, append([]any{"rank", b.r.rank, "device", int(b.r.dev)}, args...)...)
}

// localFacts queries this rank's device.
func (b *bringup) localFacts() (facts, error) {
	d, dev := b.r.d, b.r.dev
	f := facts{Rank: b.r.rank, Device: dev, Request: b.cfg.request, RequestSrc: b.cfg.requestSrc, NVLSOff: cuda.MulticastDisabledByEnv(), Shared: b.cfg.shared}
	var err error
	if f.PCI, err = d.DevicePCIBusID(dev); err != nil {
		return f, fmt.Errorf("PCI bus id: %w", err)
	}
	if f.Support, err = multicast.Query(d, dev); err != nil {
		return f, err
	}
	if f.SMCount, err = d.DeviceAttribute(cuda.AttrMultiprocessorCount, dev); err != nil {
		return f, fmt.Errorf("attribute MULTIPROCESSOR_COUNT: %w", err)
	}
	if f.Support.VMM {
		// Granularity for the handle types this rank can export: the
		// recommended one is what the workspace is rounded to.
		h := cuda.HandleNone
		if f.Support.PosixFD {
			h = cuda.HandlePosixFD
		}
		if f.AllocGran, err = vmm.Granularity(d, dev, h, true); err != nil {
			return f, err
		}
	} else {
		f.AllocGran = 1
	}
	return f, nil
}

// run is the bring-up of one rank. On error, b.r holds whatever was made,
// for the caller to tear down.
func (b *bringup) run() error {
	r := b.r
	boot := r.boot
	n := boot.Size()

	// 1. Facts: every rank's device, support and request.
	f, err := b.localFacts()
	if err != nil {
		err = b.fail(stepQuery, err)
	}
	var payload []byte
	if err == nil {
		payload, err = json.Marshal(f)
		if err != nil {
			err = b.fail(stepQuery, err)
		}
	}
	msgs, err := exchange(b.ctx, boot, stepQuery, err, payload)
	if err != nil {
		return err
	}
	all := make([]facts, n)
	for i, m := range msgs {
		if err := json.Unmarshal(m, &all[i]); err != nil {
			return b.fail(stepQuery, fmt.Errorf("facts of rank %d: %w", i, err))
		}
	}
	dec, err := decide(all, b.byValue)
	if err != nil {
		// Every rank reached the same verdict from the same facts.
		return err
	}
	b.info(stepQuery, "ranks", n, "transport", dec.transport.String(), "reason", dec.reason)

	// 2. Peer access from this device to every other, and the multicast
	// granularity where multicast was chosen (never queried otherwise).
	// A rank on this very device (WithSharedDevices) needs no peer
	// access: cuDeviceCanAccessPeer(d, d) answers false, but a device
	// reaches its own memory through any mapping it has access to.
	b.dec = dec
	b.auto = dec.auto
	b.sh.handles = dec.handles
	var pf peerFacts
	err = func() error {
		for q := range all {
			if q == r.rank || all[q].PCI == all[r.rank].PCI {
				continue
			}
			ok, err := r.d.DeviceCanAccessPeer(r.dev, all[q].Device)
			if err != nil {
				return fmt.Errorf("cuDeviceCanAccessPeer(%d, %d): %w", r.dev, all[q].Device, err)
			}
			if !ok {
				pf.NoAccess = append(pf.NoAccess, q)
			}
		}
		return nil
	}()
	if err != nil {
		err = b.fail(stepPeers, err)
	} else if dec.transport == Multicast {
		g, gerr := multicast.Granularity(r.d, []cuda.Device{r.dev}, n, kernels.SignalBytes+b.cfg.dataBytes, dec.handles)
		if gerr == nil {
			pf.MCGran = g.Multicast
		} else if err = b.mcFail(stepMCGran, gerr); b.auto {
			// A fabric error here is carried in the facts, so that the
			// peer access check still sees every rank's answer.
			var fe *FabricError
			if errors.As(err, &fe) {
				w := fe.wire()
				pf.MCFail, err = &w, nil
			}
		}
	}
	payload = nil
	if err == nil {
		payload, _ = json.Marshal(pf)
	}
	msgs, err = exchange(b.ctx, boot, stepPeers, err, payload)
	if err != nil {
		return err
	}
	peers := make([]peerFacts, n)
	for i, m := range msgs {
		if err := json.Unmarshal(m, &peers[i]); err != nil {
			return b.fail(stepPeers, fmt.Errorf("peer facts of rank %d: %w", i, err))
		}
	}
	if err := checkPeers(all, peers); err != nil {
		return err
	}
	b.sh = shared{
		size: n, transport: dec.transport, reason: dec.reason, handles: dec.handles, smCount: dec.smCount,
		gran: dec.gran, dataBytes: b.cfg.dataBytes, onDevice: dec.onDevice,
	}
	var fe *FabricError
	if dec.transport == Multicast {
		var failed []int
		for q, p := range peers {
			if p.MCFail != nil {
				if fe == nil {
					fe = p.MCFail.fabricError()
				}
				failed = append(failed, q)
				continue
			}
			if p.MCGran == 0 {
				return fmt.Errorf("team: multicast granularity 0: %w", cuda.ErrInvalidValue)
			}
			b.sh.gran = multicast.LCM(b.sh.gran, p.MCGran)
		}
		if fe != nil {
			fe.failed = failed
			b.sh.gran = dec.gran
		}
	}
	b.sh.wsBytes = multicast.RoundUp(kernels.SignalBytes+b.cfg.dataBytes, b.sh.gran)
	if fe != nil {
		if err := b.fallBack(fe); err != nil {
			return err
		}
	}
	b.info(stepPeers, "workspace_bytes", b.sh.wsBytes, "granularity", b.sh.gran)

	// 3. The multicast object: created once, every device added before any
	// bind. A fabric error in auto mode makes every rank fall back.
	if b.sh.transport == Multicast {
		fe, err := b.multicastObject()
		if err != nil {
			return err
		}
		if fe != nil {
			if err := b.fallBack(fe); err != nil {
				return err
			}
		}
	}

	// 4. This rank's workspace memory, bound to the multicast object.
	r.own, err = vmm.Create(r.d, r.dev, b.sh.wsBytes, vmm.AllocOptions{Handles: b.sh.handles})
	if err != nil {
		err = b.fail(stepMemCreate, err)
	}
	if err := b.agree(stepMemCreate, err); err != nil {
		return err
	}
	b.info(stepMemCreate, "bytes", b.sh.wsBytes)
	if b.sh.transport == Multicast {
		fe, err := b.bindAndMap()
		if err != nil {
			return err
		}
		if fe != nil {
			if err := b.fallBack(fe); err != nil {
				return err
			}
		}
	}

	// 6. The UC alias on this device, and a zeroed signal area before any
	// rank may signal.
	err = b.mapOwn()
	if err != nil {
		err = b.fail(stepMapOwn, err)
	}
	if err == nil {
		if err = r.d.MemsetD8(r.ucBase[r.rank], 0, kernels.SignalBytes); err == nil {
			err = r.d.CtxSynchronize()
		}
		if err != nil {
			err = b.fail(stepZero, err)
		}
	}
	if err := b.agree(stepZero, err); err != nil {
		return err
	}
	b.info(stepMapOwn, "uc_base", fmt.Sprintf("%#x", uint64(r.ucBase[r.rank])))

	// 7. Every peer's workspace mapped on this device.
	handles, err := b.shareWorkspace()
	if err != nil {
		return err
	}
	err = b.mapPeers(handles)
	if err != nil {
		err = b.fail(stepMapPeers, err)
	}
	if err := b.agree(stepMapPeers, err); err != nil {
		return err
	}
	b.info(stepMapPeers, "peers", n-1)
	return nil
}

// multicastObject creates the object on rank 0, shares it and adds every
// rank's device; the exchange after the adds is the barrier that says
// every device was added. A non-nil FabricError (and nil error) means
// the ranks agreed to fall back to unicast.
func (b *bringup) multicastObject() (*FabricError, error) {
	r := b.r
	fe, err := b.createMulticast()
	if fe != nil || err != nil {
		return fe, err
	}
	err = r.mc.AddDevice(r.dev)
	if err != nil {
		err = b.mcFail(stepMCAdd, err)
	}
	// This exchange is the barrier: nobody binds before every device was
	// added.
	if fe, err := b.mcAgree(stepMCAdd, err); fe != nil || err != nil {
		return fe, err
	}
	if err := r.mc.ConfirmAllAdded(); err != nil {
		return nil, b.fail(stepMCAdd, err)
	}
	b.info(stepMCAdd)
	return nil, nil
}

// bindAndMap binds this rank's workspace to the multicast object and,
// after every rank bound, maps the multicast alias (MC).
func (b *bringup) bindAndMap() (*FabricError, error) {
	r := b.r
	err := r.mc.Bind(r.dev, 0, r.own.Handle(), 0, b.sh.wsBytes)
	if err != nil {
		err = b.mcFail(stepMCBind, err)
	} else {
		r.mcBound, r.mcBytes = true, b.sh.wsBytes
	}
	if fe, err := b.mcAgree(stepMCBind, err); fe != nil || err != nil {
		return fe, err
	}
	b.info(stepMCBind)
	// 5. The MC alias, after every bind.
	r.mcBase, err = r.mc.MapMC(r.dev)
	if err != nil {
		err = b.mcFail(stepMCMap, err)
	}
	if fe, err := b.mcAgree(stepMCMap, err); fe != nil || err != nil {
		return fe, err
	}
	b.info(stepMCMap, "mc_base", fmt.Sprintf("%#x", uint64(r.mcBase)))
	return nil, nil
}

// createMulticast: rank 0 creates the object; the others attach to it
// (in-process, the handle shared by value) or import it (exported as a
// POSIX FD). Rank 0 keeps its reference; the exchange after the import is
// the barrier that says every rank holds its own.
func (b *bringup) createMulticast() (*FabricError, error) {
	r := b.r
	boot := r.boot
	n, S, ht := b.sh.size, b.sh.wsBytes, b.sh.handles
	var err error
	var payload []byte
	exportFD := -1
	if r.rank == 0 {
		r.mc, err = multicast.Create(r.d, n, S, ht)
		if err == nil && !b.byValue {
			var sh cuda.ShareableHandle
			sh, err = r.mc.Export(cuda.HandlePosixFD)
			exportFD = sh.FD
		}
		if err != nil {
			err = b.mcFail(stepMCCreate, err)
		} else {
			payload = binary.LittleEndian.AppendUint64(nil, uint64(r.mc.Handle()))
		}
	}
	msgs, fe, err := exchangeFB(b.ctx, boot, stepMCCreate, err, payload, b.auto)
	if fe != nil || err != nil {
		closeFD(exportFD)
		return fe, err
	}
	b.info(stepMCCreate, "bytes", S, "devices", n)
	if b.byValue {
		if r.rank != 0 {
			if len(msgs[0]) != 8 {
				err = fmt.Errorf("multicast handle of %d bytes from rank 0", len(msgs[0]))
			} else {
				r.mc, err = multicast.Attach(r.d, cuda.MemHandle(binary.LittleEndian.Uint64(msgs[0])), n, S, ht)
			}
		}
	} else {
		var fds []int
		fds, err = boot.AllGatherFDs(b.ctx, exportFD)
		closeFD(exportFD)
		if err == nil && r.rank != 0 {
			if fds[0] < 0 {
				err = errors.New("rank 0 sent no multicast handle")
			} else {
				r.mc, err = multicast.Import(r.d, cuda.ShareableHandle{Type: cuda.HandlePosixFD, FD: fds[0]}, n, S)
			}
		}
		for _, fd := range fds {
			closeFD(fd)
		}
	}
	if err != nil {
		err = b.mcFail(stepMCShare, err)
	}
	return b.mcAgree(stepMCShare, err)
}

func closeFD(fd int) {
	if fd >= 0 {
		syscall.Close(fd)
	}
}

// reserveAlign is the alignment of the team's reservations: the
// granularity where it is a power of two (it always is on real devices).
func (b *bringup) reserveAlign() uint64 {
	g := b.sh.gran
	if g&(g-1) == 0 {
		return g
	}
	return 0
}

func (b *bringup) mapOwn() error {
	r := b.r
	var err error
	r.ownRes, err = vmm.Reserve(r.d, b.sh.wsBytes, b.reserveAlign(), 0)
	if err != nil {
		return err
	}
	r.ownMap, err = vmm.Map(r.ownRes, 0, r.own.Handle(), b.sh.wsBytes)
	if err != nil {
		return err
	}
	if err := r.ownMap.SetAccess([]cuda.Device{r.dev}, cuda.AccessReadWrite); err != nil {
		return err
	}
	r.ucBase[r.rank] = r.ownMap.Ptr()
	return nil
}

// shareWorkspace gives every rank every other rank's allocation handle: by
// value in-process, else exported and imported as POSIX FDs (every
// received FD closed once imported).
func (b *bringup) shareWorkspace() ([]cuda.MemHandle, error) {
	r := b.r
	boot := r.boot
	n := b.sh.size
	handles := make([]cuda.MemHandle, n)
	r.peers = make([]peerMap, n)
	if b.byValue {
		msgs, err := exchange(b.ctx, boot, stepShareMem, nil, binary.LittleEndian.AppendUint64(nil, uint64(r.own.Handle())))
		if err != nil {
			return nil, err
		}
		for q, m := range msgs {
			if len(m) != 8 {
				return nil, b.fail(stepShareMem, fmt.Errorf("handle of %d bytes from rank %d", len(m), q))
			}
			handles[q] = cuda.MemHandle(binary.LittleEndian.Uint64(m))
		}
		return handles, nil
	}
	sh, err := r.own.Export(cuda.HandlePosixFD)
	if err != nil {
		err = b.fail(stepShareMem, err)
	}
	if err := b.agree(stepShareMem, err); err != nil {
		closeFD(sh.FD)
		return nil, err
	}
	fds, err := boot.AllGatherFDs(b.ctx, sh.FD)
	closeFD(sh.FD)
	defer func() {
		for _, fd := range fds {
			closeFD(fd)
		}
	}()
	for q, fd := range fds {
		if q == r.rank || err != nil {
			continue
		}
		if fd < 0 {
			err = fmt.Errorf("rank %d sent no workspace handle", q)
			break
		}
		a, ierr := vmm.ImportSized(r.d, cuda.ShareableHandle{Type: cuda.HandlePosixFD, FD: fd}, b.sh.wsBytes)
		if ierr != nil {
			err = fmt.Errorf("import rank %d's workspace: %w", q, ierr)
			break
		}
		r.peers[q].alloc = a
		handles[q] = a.Handle()
	}
	if err != nil {
		err = b.fail(stepShareMem, err)
	}
	if err := b.agree(stepShareMem, err); err != nil {
		return nil, err
	}
	return handles, nil
}

// mapPeers maps every other rank's allocation into a range of its own,
// readable and writable by this rank's device.
func (b *bringup) mapPeers(handles []cuda.MemHandle) error {
	r := b.r
	for q, h := range handles {
		if q == r.rank {
			continue
		}
		p := &r.peers[q]
		var err error
		if p.res, err = vmm.Reserve(r.d, b.sh.wsBytes, b.reserveAlign(), 0); err != nil {
			return fmt.Errorf("rank %d: %w", q, err)
		}
		if p.m, err = vmm.Map(p.res, 0, h, b.sh.wsBytes); err != nil {
			return fmt.Errorf("rank %d: %w", q, err)
		}
		if err := p.m.SetAccess([]cuda.Device{r.dev}, cuda.AccessReadWrite); err != nil {
			return fmt.Errorf("rank %d: %w", q, err)
		}
		r.ucBase[q] = p.m.Ptr()
	}
	return nil
}
