package team

import (
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/nvls-go/nvls/cuda"
	"github.com/nvls-go/nvls/internal/kabi"
	"github.com/nvls-go/nvls/multicast"
	"github.com/nvls-go/nvls/vmm"
)

// The steps of the bring-up (the table in bringup.go), in its order. Each
// acquires what it needs on this rank's device and pushes its undo.

// queryDevice: this rank's device, its support and the transport asked
// for, sent to every rank.
func queryDevice(b *bringup) error {
	f, err := b.localFacts()
	if err != nil {
		return err
	}
	b.send, err = json.Marshal(f)
	return err
}

// localFacts queries this rank's device.
func (b *bringup) localFacts() (facts, error) {
	d, dev := b.r.d, b.r.dev
	f := facts{Rank: b.r.rank, Device: dev, Request: b.cfg.request, RequestSrc: b.cfg.requestSrc,
		NVLSOff: b.cfg.nvlsOff, SharedDevices: b.cfg.sharedDevices}
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
	f.AllocGran = 1
	if f.Support.VMM {
		// The recommended granularity for the handle types this rank can
		// export: the workspace is rounded up to it.
		h := cuda.HandleNone
		if f.Support.PosixFD {
			h = cuda.HandlePosixFD
		}
		f.AllocGran, err = vmm.Granularity(d, dev, h, true)
	}
	return f, err
}

// chooseTransport: every rank decides from the same facts.
func chooseTransport(b *bringup) error {
	b.facts = make([]facts, len(b.recv))
	for i, m := range b.recv {
		if err := json.Unmarshal(m, &b.facts[i]); err != nil {
			return b.fail(stepQuery, fmt.Errorf("facts of rank %d: %w", i, err))
		}
	}
	dec, err := decide(b.facts, b.byValue)
	if err != nil {
		return err
	}
	b.dec = dec
	b.agreed = agreement{
		size: len(b.facts), transport: dec.transport, reason: dec.reason, handles: dec.handles, smCount: dec.smCount,
		layout: kabi.Layout{Data: b.cfg.dataBytes, Gran: dec.gran}, onDevice: dec.onDevice,
	}
	return nil
}

// checkPeerAccess from this device to every other one. A rank on this very
// device (WithSharedDevices) needs none: cuDeviceCanAccessPeer(d, d) says
// false, but a device reaches its own memory through any mapping.
func checkPeerAccess(b *bringup) error {
	r := b.r
	var none []int
	for q, f := range b.facts {
		if q == r.rank || f.PCI == b.facts[r.rank].PCI {
			continue
		}
		ok, err := r.d.DeviceCanAccessPeer(r.dev, f.Device)
		if err != nil {
			return fmt.Errorf("device %d to device %d: %w", r.dev, f.Device, err)
		}
		if !ok {
			none = append(none, q)
		}
	}
	var err error
	b.send, err = json.Marshal(none)
	return err
}

// agreePeerAccess: every pair of devices must reach each other.
func agreePeerAccess(b *bringup) error {
	var errs []error
	for r, m := range b.recv {
		var none []int
		if err := json.Unmarshal(m, &none); err != nil {
			return b.fail(stepPeers, fmt.Errorf("peer access of rank %d: %w", r, err))
		}
		for _, q := range none {
			errs = append(errs, fmt.Errorf("%s cannot access %s (cuDeviceCanAccessPeer)", b.facts[r].where(), b.facts[q].where()))
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("%w: %w", ErrNoPeerAccess, errors.Join(errs...))
	}
	return nil
}

// queryMulticastGranularity (recommended) on this rank's driver. The
// allocation granularity is the one queryDevice asked for (the facts'
// AllocGran), not asked again.
func queryMulticastGranularity(b *bringup) error {
	g, err := multicast.ObjectGranularity(b.r.d, b.agreed.size, b.agreed.layout.DataEnd(), b.agreed.handles)
	b.send = binary.LittleEndian.AppendUint64(nil, g)
	return err
}

// sizeForMulticast rounds the workspace up to every rank's multicast
// granularity too.
func sizeForMulticast(b *bringup) error {
	gran := b.dec.gran
	for q, m := range b.recv {
		if len(m) != 8 || binary.LittleEndian.Uint64(m) == 0 {
			return fmt.Errorf("team: multicast granularity of rank %d is 0 or missing: %w", q, cuda.ErrInvalidValue)
		}
		gran = multicast.LCM(gran, binary.LittleEndian.Uint64(m))
	}
	b.agreed.layout.Gran = gran
	return nil
}

// createMulticast: rank 0 makes the team's one multicast object (never one
// per call: NVSwitch has few) and sends its handle, by value in-process,
// else exported as a POSIX FD.
func createMulticast(b *bringup) error {
	r, a := b.r, b.agreed
	if r.rank != 0 {
		return nil
	}
	mc := r.mc // made by an earlier try of this step
	if mc == nil {
		var err error
		if mc, err = multicast.Create(r.d, a.size, a.layout.Size(), a.handles); err != nil {
			return err
		}
		b.holdMulticast(mc)
	}
	if b.byValue {
		b.send = binary.LittleEndian.AppendUint64(nil, uint64(mc.Handle()))
		return nil
	}
	sh, err := mc.Export(cuda.HandlePosixFD)
	if err != nil {
		return err
	}
	b.sendFD = sh.FD
	return nil
}

// shareMulticast: every other rank attaches to rank 0's object (by value)
// or imports it (from its FD); each holds its own reference.
func shareMulticast(b *bringup) error {
	r, a := b.r, b.agreed
	var mc *multicast.Object
	var err error
	switch {
	case r.rank == 0 || r.mc != nil: // the creator, or done by an earlier try
		return nil
	case b.byValue && len(b.recv[0]) != 8:
		return fmt.Errorf("multicast handle of %d bytes from rank 0", len(b.recv[0]))
	case b.byValue:
		mc, err = multicast.Attach(r.d, cuda.MemHandle(binary.LittleEndian.Uint64(b.recv[0])), a.size, a.layout.Size(), a.handles)
	case b.fds[0] < 0:
		return errors.New("rank 0 sent no multicast handle")
	default:
		mc, err = multicast.Import(r.d, cuda.ShareableHandle{Type: cuda.HandlePosixFD, FD: b.fds[0]}, a.size, a.layout.Size())
	}
	if err != nil {
		return err
	}
	b.holdMulticast(mc)
	return nil
}

// holdMulticast makes mc this rank's multicast object and pushes its
// release: once it is unbound and unmapped, and for its creator once no
// other local rank is attached to it.
func (b *bringup) holdMulticast(mc *multicast.Object) {
	r, holders := b.r, b.holders
	attached := mc.Origin() == multicast.Attached
	if attached {
		holders.Add(1)
	}
	r.mc = mc
	b.push("release multicast object", func() error {
		switch {
		case r.mcBound || r.mcBase != 0:
			return notYet("still bound or mapped")
		case mc.Origin() == multicast.Created && holders != nil && holders.Load() > 0:
			return notYet("%d other rank(s) still attached to it", holders.Load())
		}
		if err := mc.Close(); err != nil {
			return err
		}
		if attached {
			holders.Add(-1)
		}
		r.mc = nil
		return nil
	})
}

// addDevice adds this rank's device to the object. The exchange after it
// is the barrier that says every device was added: nobody binds before.
func addDevice(b *bringup) error { return b.r.mc.AddDevice(b.r.dev) }

// confirmAllAdded tells the object that the barrier passed.
func confirmAllAdded(b *bringup) error {
	if err := b.r.mc.ConfirmAllAdded(); err != nil {
		return b.fail(stepMCAdd, err)
	}
	return nil
}

// createWorkspace: this rank's workspace memory (cuMemCreate), exportable
// as the team's handle type.
func createWorkspace(b *bringup) error {
	r := b.r
	// The granularity is the one the ranks agreed on (a multiple of every
	// rank's recommended allocation granularity): not asked again.
	own, err := vmm.Create(r.d, r.dev, b.agreed.layout.Size(), vmm.AllocOptions{Handles: b.agreed.handles, Granularity: b.agreed.layout.Gran})
	if err != nil {
		return err
	}
	r.own = own
	b.push("release workspace memory", func() error {
		if r.mcBound {
			return notYet("still bound to the multicast object")
		}
		if err := own.Close(); err != nil {
			return err
		}
		r.own = nil
		return nil
	})
	return nil
}

// bindWorkspace binds this rank's workspace to the multicast object.
func bindWorkspace(b *bringup) error {
	r, size := b.r, b.agreed.layout.Size()
	if err := r.mc.Bind(r.dev, 0, r.own.Handle(), 0, size); err != nil {
		return err
	}
	r.mcBound = true
	mc := r.mc
	b.push("unbind multicast memory", func() error {
		if mc.Mappings() > 0 {
			return notYet("the multicast object is still mapped")
		}
		if err := mc.Unbind(r.dev, 0, size); err != nil {
			return err
		}
		r.mcBound = false
		return nil
	})
	return nil
}

// mapMulticast maps the multicast object on this device (the MC alias),
// after every rank bound.
func mapMulticast(b *bringup) error {
	r, mc := b.r, b.r.mc
	base, err := mc.MapMC(r.dev)
	if err != nil {
		return err
	}
	r.mcBase = base
	b.push("unmap multicast object", func() error {
		if err := mc.UnmapMC(base); err != nil {
			return err
		}
		r.mcBase = 0
		return nil
	})
	return nil
}

// mapWorkspace maps this rank's own workspace (the UC alias).
func mapWorkspace(b *bringup) error {
	r := b.r
	base, err := b.mapRange("workspace", r.own.Handle(), func() { r.ucBase[r.rank] = 0 })
	r.ucBase[r.rank] = base
	return err
}

// zeroSignals zeroes the signal area before any rank may signal.
func zeroSignals(b *bringup) error {
	r := b.r
	if err := r.d.MemsetD8(r.ucBase[r.rank], 0, kabi.SignalBytes); err != nil {
		return err
	}
	return r.d.CtxSynchronize()
}

// shareWorkspace sends this rank's workspace handle to every rank: by
// value in-process, else exported as a POSIX FD.
func shareWorkspace(b *bringup) error {
	if b.byValue {
		b.send = binary.LittleEndian.AppendUint64(nil, uint64(b.r.own.Handle()))
		return nil
	}
	sh, err := b.r.own.Export(cuda.HandlePosixFD)
	if err != nil {
		return err
	}
	b.sendFD = sh.FD
	return nil
}

// peerHandles reads every rank's handle (in-process).
func peerHandles(b *bringup) error {
	if !b.byValue {
		return nil
	}
	b.handles = make([]cuda.MemHandle, len(b.recv))
	for q, m := range b.recv {
		if len(m) != 8 {
			return b.fail(stepShareMem, fmt.Errorf("handle of %d bytes from rank %d", len(m), q))
		}
		b.handles[q] = cuda.MemHandle(binary.LittleEndian.Uint64(m))
	}
	return nil
}

// importWorkspaces imports every peer's workspace from its FD (across
// processes); each holds its own reference.
func importWorkspaces(b *bringup) error {
	r := b.r
	b.handles = make([]cuda.MemHandle, len(b.fds))
	b.handles[r.rank] = r.own.Handle()
	for q, fd := range b.fds {
		if q == r.rank {
			continue
		}
		if fd < 0 {
			return fmt.Errorf("rank %d sent no workspace handle", q)
		}
		a, err := vmm.ImportSized(r.d, cuda.ShareableHandle{Type: cuda.HandlePosixFD, FD: fd}, b.agreed.layout.Size())
		if err != nil {
			return fmt.Errorf("import rank %d's workspace: %w", q, err)
		}
		b.push(fmt.Sprintf("release rank %d's imported workspace", q), a.Close)
		b.handles[q] = a.Handle()
	}
	return nil
}

// mapPeerWorkspaces maps every peer's workspace on this device.
func mapPeerWorkspaces(b *bringup) error {
	r := b.r
	for q, h := range b.handles {
		if q == r.rank {
			continue
		}
		base, err := b.mapRange(fmt.Sprintf("rank %d's workspace", q), h, func() { r.ucBase[q] = 0 })
		r.ucBase[q] = base
		if err != nil {
			return fmt.Errorf("rank %d: %w", q, err)
		}
	}
	return nil
}

// mapRange reserves a range of the workspace's size, maps h there with
// access for this rank's device and pushes the undo (unmap, then free
// the range); gone runs once it is unmapped.
func (b *bringup) mapRange(what string, h cuda.MemHandle, gone func()) (cuda.DevicePtr, error) {
	r, size := b.r, b.agreed.layout.Size()
	res, err := vmm.Reserve(r.d, size, b.reserveAlign(), 0)
	if err != nil {
		return 0, err
	}
	var m *vmm.Mapping
	b.push("unmap "+what, func() error {
		if m != nil {
			if err := m.Close(); err != nil {
				return err
			}
			m = nil
			gone()
		}
		return res.Close()
	})
	if m, err = vmm.Map(res, 0, h, size); err != nil {
		return 0, err
	}
	if err := m.SetAccess([]cuda.Device{r.dev}, cuda.AccessReadWrite); err != nil {
		return 0, err
	}
	return m.Ptr(), nil
}

// reserveAlign is the alignment of the team's reservations: the
// granularity where it is a power of two (it always is on real devices).
func (b *bringup) reserveAlign() uint64 {
	if g := b.agreed.layout.Gran; g&(g-1) == 0 {
		return g
	}
	return 0
}

func hex(p cuda.DevicePtr) string { return fmt.Sprintf("%#x", uint64(p)) }
