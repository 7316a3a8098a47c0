package sim

import (
	"encoding/binary"
	"errors"
	"fmt"
	"time"

	"github.com/nvls-go/nvls/cuda"
)

// deviceMemory is Memory as one device (or, with host set, a test oracle
// that ignores access rights) sees it.
type deviceMemory struct {
	n    *Node
	dev  cuda.Device
	host bool
}

// Memory returns device memory as device dev sees it: what a KernelFunc
// gets in Launch.Mem. Tests use it to run reference kernels directly.
func (n *Node) Memory(dev cuda.Device) Memory {
	return &deviceMemory{n: n, dev: dev}
}

// ReadDevice reads n bytes at addr, ignoring access rights (a test
// oracle). addr may not be a multicast address.
func (n *Node) ReadDevice(addr cuda.DevicePtr, size int) ([]byte, error) {
	buf := make([]byte, size)
	m := &deviceMemory{n: n, dev: -1, host: true}
	if err := m.Load(addr, buf); err != nil {
		return nil, err
	}
	return buf, nil
}

// WriteDevice writes src at addr, ignoring access rights (a test oracle).
func (n *Node) WriteDevice(addr cuda.DevicePtr, src []byte) error {
	m := &deviceMemory{n: n, dev: -1, host: true}
	return m.Store(addr, src)
}

// errIllegal is the fault a bad access raises. It is a *cuda.Error with
// code CUDA_ERROR_ILLEGAL_ADDRESS, so errors.Is(err, cuda.ErrIllegalAddress)
// holds.
func errIllegal(op string, format string, args ...any) error {
	return cuda.NewError(op, cuda.ErrorIllegalAddress, fmt.Sprintf(format, args...))
}

func errIsIllegal(err error) bool { return errors.Is(err, cuda.ErrIllegalAddress) }

func (m *deviceMemory) who() string {
	if m.host {
		return "host"
	}
	return fmt.Sprintf("device %d", m.dev)
}

// canAccess checks the rights of m's device on a mapping.
func (m *deviceMemory) canAccess(mp *mapping, write bool) bool {
	if m.host || mp.all {
		return true
	}
	if m.dev < 0 || int(m.dev) >= len(mp.access) {
		return false
	}
	f := cuda.AccessFlags(mp.access[m.dev].Load())
	if write {
		return f == cuda.AccessReadWrite
	}
	return f == cuda.AccessRead || f == cuda.AccessReadWrite
}

// unicast resolves [addr, addr+size) to the pieces of physical memory it
// covers, calling fn for each; every piece must be mapped, unicast and
// accessible.
func (m *deviceMemory) unicast(op string, addr cuda.DevicePtr, size uint64, write bool, fn func(a *physAlloc, off uint64, from, k uint64)) error {
	at := uint64(addr)
	var done uint64
	for done < size {
		mp := m.n.lookup(at)
		if mp == nil {
			return errIllegal(op, "%s: address %#x is not mapped", m.who(), at)
		}
		if mp.mc != nil {
			return errIllegal(op, "%s: address %#x is a multicast mapping: only multimem operations may access it", m.who(), at)
		}
		if !m.canAccess(mp, write) {
			mode := "read"
			if write {
				mode = "write"
			}
			return errIllegal(op, "%s has no %s access to %#x (mapping [%#x, %#x); cuMemSetAccess not done for it)", m.who(), mode, at, mp.start, mp.end())
		}
		k := min(size-done, mp.end()-at)
		fn(mp.alloc, mp.off+at-mp.start, done, k)
		done += k
		at += k
	}
	return nil
}

// check validates a span without touching it.
func (m *deviceMemory) check(op string, addr cuda.DevicePtr, size uint64, write bool) error {
	return m.unicast(op, addr, size, write, func(*physAlloc, uint64, uint64, uint64) {})
}

func (m *deviceMemory) Load(addr cuda.DevicePtr, dst []byte) error {
	return m.unicast("ld.global", addr, uint64(len(dst)), false, func(a *physAlloc, off, from, k uint64) {
		a.read(off, dst[from:from+k])
	})
}

func (m *deviceMemory) Store(addr cuda.DevicePtr, src []byte) error {
	return m.unicast("st.global", addr, uint64(len(src)), true, func(a *physAlloc, off, from, k uint64) {
		a.write(off, src[from:from+k])
	})
}

// word resolves an aligned word access of size sz to one allocation.
func (m *deviceMemory) word(op string, addr cuda.DevicePtr, sz uint64, write bool) (*physAlloc, uint64, error) {
	if uint64(addr)%sz != 0 {
		return nil, 0, errIllegal(op, "%s: address %#x is not aligned to %d bytes", m.who(), uint64(addr), sz)
	}
	var a *physAlloc
	var o uint64
	err := m.unicast(op, addr, sz, write, func(x *physAlloc, off, _, _ uint64) { a, o = x, off })
	return a, o, err
}

func (m *deviceMemory) LoadU32(addr cuda.DevicePtr) (uint32, error) {
	a, off, err := m.word("ld.acquire.u32", addr, 4, false)
	if err != nil {
		return 0, err
	}
	var b [4]byte
	a.read(off, b[:])
	return binary.LittleEndian.Uint32(b[:]), nil
}

func (m *deviceMemory) AtomicAddU32(addr cuda.DevicePtr, delta uint32) (uint32, error) {
	a, off, err := m.word("atom.add.u32", addr, 4, true)
	if err != nil {
		return 0, err
	}
	return a.addU32(off, delta), nil
}

func (m *deviceMemory) AtomicCASU64(addr cuda.DevicePtr, old, new uint64) (uint64, error) {
	a, off, err := m.word("atom.cas.b64", addr, 8, true)
	if err != nil {
		return 0, err
	}
	a.mu.Lock()
	defer a.mu.Unlock()
	var b [8]byte
	a.readLocked(off, b[:])
	cur := binary.LittleEndian.Uint64(b[:])
	if cur == old {
		binary.LittleEndian.PutUint64(b[:], new)
		a.writeLocked(off, b[:])
	}
	return cur, nil
}

func (a *physAlloc) addU32(off uint64, delta uint32) uint32 {
	a.mu.Lock()
	defer a.mu.Unlock()
	var b [4]byte
	a.readLocked(off, b[:])
	old := binary.LittleEndian.Uint32(b[:])
	binary.LittleEndian.PutUint32(b[:], old+delta)
	a.writeLocked(off, b[:])
	return old
}

// multicast resolves a multimem access to the bound allocations, in the
// order the devices were added, and calls fn for each.
func (m *deviceMemory) multicast(op string, addr cuda.DevicePtr, n int, write bool, fn func(i int, a *physAlloc, off uint64)) error {
	if n != 4 && n != 8 && n != 16 {
		return errIllegal(op, "%s: multimem access of %d bytes: must be 4, 8 or 16", m.who(), n)
	}
	at := uint64(addr)
	if at%uint64(n) != 0 {
		return errIllegal(op, "%s: multimem address %#x is not aligned to the access size %d", m.who(), at, n)
	}
	mp := m.n.lookup(at)
	if mp == nil {
		return errIllegal(op, "%s: address %#x is not mapped", m.who(), at)
	}
	if mp.mc == nil {
		return errIllegal(op, "%s: multimem access to %#x, which is not a multicast mapping", m.who(), at)
	}
	if !m.canAccess(mp, write) {
		return errIllegal(op, "%s has no access to the multicast mapping at %#x (cuMemSetAccess not done for it)", m.who(), at)
	}
	mc := mp.mc
	mcOff := mp.off + at - mp.start
	mc.mu.RLock()
	defer mc.mu.RUnlock()
	if !m.host {
		member := false
		for _, d := range mc.devices {
			if d == m.dev {
				member = true
			}
		}
		if !member {
			return errIllegal(op, "device %d is not a member of multicast object %#x", m.dev, mc.id)
		}
	}
	for i, d := range mc.devices {
		b := mc.bindFor(d, mcOff)
		if b == nil {
			return errIllegal(op, "%s: multicast offset %#x has no memory bound for device %d", m.who(), mcOff, d)
		}
		fn(i, b.alloc, b.memOff+mcOff-b.mcOff)
	}
	return nil
}

func (m *deviceMemory) MultimemLoad(addr cuda.DevicePtr, n int) ([][]byte, error) {
	out := make([][]byte, 0, kernelsMaxGroup)
	var buf []byte
	err := m.multicast("multimem.ld_reduce", addr, n, false, func(i int, a *physAlloc, off uint64) {
		if len(buf)+n > cap(buf) {
			buf = make([]byte, 0, n*kernelsMaxGroup)
		}
		s := buf[len(buf) : len(buf)+n : len(buf)+n]
		buf = buf[:len(buf)+n]
		a.read(off, s)
		out = append(out, s)
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

// kernelsMaxGroup sizes MultimemLoad's buffer (a node has at most 8 GPUs
// on one NVSwitch in practice; more still works, with another buffer).
const kernelsMaxGroup = 8

func (m *deviceMemory) MultimemStore(addr cuda.DevicePtr, src []byte) error {
	return m.multicast("multimem.st", addr, len(src), true, func(_ int, a *physAlloc, off uint64) {
		a.write(off, src)
	})
}

func (m *deviceMemory) MultimemAddU32(addr cuda.DevicePtr, delta uint32) error {
	return m.multicast("multimem.red.add.u32", addr, 4, true, func(_ int, a *physAlloc, off uint64) {
		a.addU32(off, delta)
	})
}

func (m *deviceMemory) GlobalTimer() uint64 {
	return uint64(time.Since(m.n.start).Nanoseconds())
}

// SpanMemory is implemented by every Memory a Node hands out: multimem
// accesses over whole spans, each equivalent to a loop of width-byte
// multimem accesses from addr upwards, but done with one address lookup
// and one lock per allocation. Use the package functions MultimemLoadSpan
// and MultimemStoreSpan, which fall back to the loop for other Memory
// implementations.
type SpanMemory interface {
	Memory
	// MultimemLoadSpan returns, for every allocation bound to the
	// multicast object (in the order the devices were added), a copy of
	// size bytes at addr.
	MultimemLoadSpan(addr cuda.DevicePtr, size, width int) ([][]byte, error)
	// MultimemStoreSpan stores src at addr in every bound allocation.
	MultimemStoreSpan(addr cuda.DevicePtr, src []byte, width int) error
}

var _ SpanMemory = (*deviceMemory)(nil)

// MultimemLoadSpan is a loop of MultimemLoad(addr+i, width) over size
// bytes (size a multiple of width): it returns one size-byte slice per
// bound allocation.
func MultimemLoadSpan(mem Memory, addr cuda.DevicePtr, size, width int) ([][]byte, error) {
	if s, ok := mem.(SpanMemory); ok {
		return s.MultimemLoadSpan(addr, size, width)
	}
	if width <= 0 || size%width != 0 {
		return nil, errIllegal("multimem.ld_reduce", "span of %d bytes is not a multiple of the access width %d", size, width)
	}
	var out [][]byte
	for i := 0; i < size; i += width {
		parts, err := mem.MultimemLoad(addr+cuda.DevicePtr(i), width)
		if err != nil {
			return nil, err
		}
		if out == nil {
			out = make([][]byte, len(parts))
			for j := range out {
				out[j] = make([]byte, size)
			}
		}
		for j, p := range parts {
			copy(out[j][i:], p)
		}
	}
	return out, nil
}

// MultimemStoreSpan is a loop of MultimemStore(addr+i, src[i:i+width])
// over src (len(src) a multiple of width).
func MultimemStoreSpan(mem Memory, addr cuda.DevicePtr, src []byte, width int) error {
	if s, ok := mem.(SpanMemory); ok {
		return s.MultimemStoreSpan(addr, src, width)
	}
	if width <= 0 || len(src)%width != 0 {
		return errIllegal("multimem.st", "span of %d bytes is not a multiple of the access width %d", len(src), width)
	}
	for i := 0; i < len(src); i += width {
		if err := mem.MultimemStore(addr+cuda.DevicePtr(i), src[i:i+width]); err != nil {
			return err
		}
	}
	return nil
}

// multicastSpan resolves a span of multimem accesses piece by piece (one
// piece per multicast mapping it crosses), calling fn for every bound
// allocation of each piece.
func (m *deviceMemory) multicastSpan(op string, addr cuda.DevicePtr, size, width int, write bool, fn func(i int, a *physAlloc, off, from, k uint64)) error {
	if width != 4 && width != 8 && width != 16 {
		return errIllegal(op, "%s: multimem access of %d bytes: must be 4, 8 or 16", m.who(), width)
	}
	if uint64(addr)%uint64(width) != 0 || size%width != 0 || size < 0 {
		return errIllegal(op, "%s: multimem span [%#x, +%d) is not made of aligned %d-byte accesses", m.who(), uint64(addr), size, width)
	}
	at, done := uint64(addr), uint64(0)
	for done < uint64(size) {
		mp := m.n.lookup(at)
		if mp == nil {
			return errIllegal(op, "%s: address %#x is not mapped", m.who(), at)
		}
		if mp.mc == nil {
			return errIllegal(op, "%s: multimem access to %#x, which is not a multicast mapping", m.who(), at)
		}
		if !m.canAccess(mp, write) {
			return errIllegal(op, "%s has no access to the multicast mapping at %#x (cuMemSetAccess not done for it)", m.who(), at)
		}
		k := min(uint64(size)-done, mp.end()-at)
		mcOff := mp.off + at - mp.start
		if err := m.spanPiece(op, mp.mc, mcOff, done, k, fn); err != nil {
			return err
		}
		done += k
		at += k
	}
	return nil
}

func (m *deviceMemory) spanPiece(op string, mc *mcObject, mcOff, from, k uint64, fn func(i int, a *physAlloc, off, from, k uint64)) error {
	mc.mu.RLock()
	defer mc.mu.RUnlock()
	if !m.host && !mc.hasDevice(m.dev) {
		return errIllegal(op, "device %d is not a member of multicast object %#x", m.dev, mc.id)
	}
	for i, d := range mc.devices {
		b := mc.bindFor(d, mcOff)
		if b == nil {
			return errIllegal(op, "%s: multicast offset %#x has no memory bound for device %d", m.who(), mcOff, d)
		}
		if mcOff+k > b.mcOff+b.size {
			return errIllegal(op, "%s: multicast offset %#x has no memory bound for device %d", m.who(), b.mcOff+b.size, d)
		}
		fn(i, b.alloc, b.memOff+mcOff-b.mcOff, from, k)
	}
	return nil
}

func (m *deviceMemory) MultimemLoadSpan(addr cuda.DevicePtr, size, width int) ([][]byte, error) {
	var out [][]byte
	err := m.multicastSpan("multimem.ld_reduce", addr, size, width, false, func(i int, a *physAlloc, off, from, k uint64) {
		for len(out) <= i {
			out = append(out, make([]byte, size))
		}
		a.read(off, out[i][from:from+k])
	})
	if err != nil {
		return nil, err
	}
	return out, nil
}

func (m *deviceMemory) MultimemStoreSpan(addr cuda.DevicePtr, src []byte, width int) error {
	return m.multicastSpan("multimem.st", addr, len(src), width, true, func(_ int, a *physAlloc, off, from, k uint64) {
		a.write(off, src[from:from+k])
	})
}
