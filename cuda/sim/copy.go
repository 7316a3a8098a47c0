package sim

import (
	"encoding/binary"
	"errors"
	"unsafe"

	"github.com/nvls-go/nvls/cuda"
)

// validSpan checks, when the call is made, that [p, p+size) is mapped
// device memory that copies may touch (not a multicast mapping): the
// driver rejects such pointers with CUDA_ERROR_INVALID_VALUE up front.
func (n *Node) validSpan(opName string, p cuda.DevicePtr, size uint64) error {
	host := &deviceMemory{n: n, dev: -1, host: true}
	if err := host.check(opName, p, size, false); err != nil {
		var e *cuda.Error
		detail := err.Error()
		if errors.As(err, &e) {
			detail = e.Detail
		}
		return errf(opName, cuda.ErrorInvalidValue, "%s", detail)
	}
	return nil
}

// asCallErr turns a fault raised while running a copy into the error of
// the entry point that made it.
func asCallErr(opName string, err error) error {
	if err == nil {
		return nil
	}
	var e *cuda.Error
	if errors.As(err, &e) {
		return cuda.NewError(opName, e.Code, e.Detail)
	}
	return cuda.NewError(opName, cuda.ErrorUnknown, err.Error())
}

func hostBytes(p unsafe.Pointer, size uint64) []byte {
	return unsafe.Slice((*byte)(p), size)
}

// copyDtoD copies device to device as dev sees memory, in pieces.
func (n *Node) copyDtoD(dev cuda.Device, dst, src cuda.DevicePtr, size uint64) error {
	mem := n.mem(dev)
	if err := mem.check("ld.global", src, size, false); err != nil {
		return err
	}
	if err := mem.check("st.global", dst, size, true); err != nil {
		return err
	}
	const piece = 1 << 20
	buf := make([]byte, min(size, piece))
	for off := uint64(0); off < size; off += piece {
		k := min(size-off, piece)
		if err := mem.Load(src+cuda.DevicePtr(off), buf[:k]); err != nil {
			return err
		}
		if err := mem.Store(dst+cuda.DevicePtr(off), buf[:k]); err != nil {
			return err
		}
	}
	return nil
}

func (n *Node) mem(dev cuda.Device) *deviceMemory {
	return &deviceMemory{n: n, dev: dev}
}

// memset fills [dst, dst+size) with the pattern pat as dev sees memory.
func (n *Node) memset(dev cuda.Device, dst cuda.DevicePtr, size uint64, pat []byte) error {
	return n.mem(dev).unicast("memset", dst, size, true, func(a *physAlloc, off, _, k uint64) {
		a.fill(off, k, pat)
	})
}

// syncCopy runs a synchronous copy or set on the current context's legacy
// stream and waits for it.
func (n *Node) syncCopy(opName string, idx int, spans [][2]uint64, run func(dev cuda.Device) error) error {
	ctx, err := n.cur(opName)
	if err != nil {
		return err
	}
	n.setCallDevice(idx, ctx.dev)
	if err := ctx.stickyErr(opName); err != nil {
		return err
	}
	for _, sp := range spans {
		if err := n.validSpan(opName, cuda.DevicePtr(sp[0]), sp[1]); err != nil {
			return err
		}
	}
	st, err := n.streamFor(opName, 0)
	if err != nil {
		return err
	}
	if st.capturing() {
		return errf(opName, cuda.ErrorCaptureUnsupported, "synchronous copy on a capturing stream")
	}
	return asCallErr(opName, st.submitWait(opName, func() error { return run(ctx.dev) }))
}

// asyncCopy enqueues a copy or set on stream s.
func (n *Node) asyncCopy(opName string, idx int, s cuda.Stream, spans [][2]uint64, run func(dev cuda.Device) error) error {
	if _, err := n.cur(opName); err != nil {
		return err
	}
	st, err := n.streamFor(opName, s)
	if err != nil {
		return err
	}
	n.setCallDevice(idx, st.ctx.dev)
	if err := st.ctx.stickyErr(opName); err != nil {
		return err
	}
	for _, sp := range spans {
		if err := n.validSpan(opName, cuda.DevicePtr(sp[0]), sp[1]); err != nil {
			return err
		}
	}
	dev := st.ctx.dev
	return st.submit(opName, func() error { return asCallErr(opName, run(dev)) })
}

// MemcpyHtoD is cuMemcpyHtoD (synchronous; ordered on the legacy stream).
func (n *Node) MemcpyHtoD(dst cuda.DevicePtr, src unsafe.Pointer, size uint64) (err error) {
	const opName = "cuMemcpyHtoD"
	i, err := n.enter(opName, -1, 0, uint64(dst), size)
	if err != nil {
		return err
	}
	defer n.leave(i, &err)
	if size == 0 {
		return nil
	}
	return n.syncCopy(opName, i, [][2]uint64{{uint64(dst), size}}, func(dev cuda.Device) error {
		return n.mem(dev).Store(dst, hostBytes(src, size))
	})
}

// MemcpyDtoH is cuMemcpyDtoH.
func (n *Node) MemcpyDtoH(dst unsafe.Pointer, src cuda.DevicePtr, size uint64) (err error) {
	const opName = "cuMemcpyDtoH"
	i, err := n.enter(opName, -1, 0, uint64(src), size)
	if err != nil {
		return err
	}
	defer n.leave(i, &err)
	if size == 0 {
		return nil
	}
	return n.syncCopy(opName, i, [][2]uint64{{uint64(src), size}}, func(dev cuda.Device) error {
		return n.mem(dev).Load(src, hostBytes(dst, size))
	})
}

// MemcpyDtoD is cuMemcpyDtoD: the current context's device needs access
// to both ranges.
func (n *Node) MemcpyDtoD(dst, src cuda.DevicePtr, size uint64) (err error) {
	const opName = "cuMemcpyDtoD"
	i, err := n.enter(opName, -1, uint64(src), uint64(dst), size)
	if err != nil {
		return err
	}
	defer n.leave(i, &err)
	if size == 0 {
		return nil
	}
	return n.syncCopy(opName, i, [][2]uint64{{uint64(dst), size}, {uint64(src), size}}, func(dev cuda.Device) error {
		return n.copyDtoD(dev, dst, src, size)
	})
}

// MemcpyHtoDAsync is cuMemcpyHtoDAsync: src is read when the stream
// reaches the copy, so it must stay alive until then.
func (n *Node) MemcpyHtoDAsync(dst cuda.DevicePtr, src unsafe.Pointer, size uint64, s cuda.Stream) (err error) {
	const opName = "cuMemcpyHtoDAsync"
	i, err := n.enter(opName, -1, uint64(s), uint64(dst), size)
	if err != nil {
		return err
	}
	defer n.leave(i, &err)
	if size == 0 {
		return nil
	}
	return n.asyncCopy(opName, i, s, [][2]uint64{{uint64(dst), size}}, func(dev cuda.Device) error {
		return n.mem(dev).Store(dst, hostBytes(src, size))
	})
}

// MemcpyDtoHAsync is cuMemcpyDtoHAsync.
func (n *Node) MemcpyDtoHAsync(dst unsafe.Pointer, src cuda.DevicePtr, size uint64, s cuda.Stream) (err error) {
	const opName = "cuMemcpyDtoHAsync"
	i, err := n.enter(opName, -1, uint64(s), uint64(src), size)
	if err != nil {
		return err
	}
	defer n.leave(i, &err)
	if size == 0 {
		return nil
	}
	return n.asyncCopy(opName, i, s, [][2]uint64{{uint64(src), size}}, func(dev cuda.Device) error {
		return n.mem(dev).Load(src, hostBytes(dst, size))
	})
}

// MemcpyDtoDAsync is cuMemcpyDtoDAsync: the stream's device needs access
// to both ranges.
func (n *Node) MemcpyDtoDAsync(dst, src cuda.DevicePtr, size uint64, s cuda.Stream) (err error) {
	const opName = "cuMemcpyDtoDAsync"
	i, err := n.enter(opName, -1, uint64(src), uint64(dst), size)
	if err != nil {
		return err
	}
	defer n.leave(i, &err)
	if size == 0 {
		return nil
	}
	return n.asyncCopy(opName, i, s, [][2]uint64{{uint64(dst), size}, {uint64(src), size}}, func(dev cuda.Device) error {
		return n.copyDtoD(dev, dst, src, size)
	})
}

// MemsetD8 is cuMemsetD8.
func (n *Node) MemsetD8(dst cuda.DevicePtr, v uint8, count uint64) (err error) {
	const opName = "cuMemsetD8"
	i, err := n.enter(opName, -1, uint64(v), uint64(dst), count)
	if err != nil {
		return err
	}
	defer n.leave(i, &err)
	if count == 0 {
		return nil
	}
	return n.syncCopy(opName, i, [][2]uint64{{uint64(dst), count}}, func(dev cuda.Device) error {
		return n.memset(dev, dst, count, []byte{v})
	})
}

func pat32(v uint32) []byte {
	b := make([]byte, 4)
	binary.LittleEndian.PutUint32(b, v)
	return b
}

// MemsetD32 is cuMemsetD32: count 32-bit words; dst 4-byte aligned.
func (n *Node) MemsetD32(dst cuda.DevicePtr, v uint32, count uint64) (err error) {
	const opName = "cuMemsetD32"
	i, err := n.enter(opName, -1, uint64(v), uint64(dst), count*4)
	if err != nil {
		return err
	}
	defer n.leave(i, &err)
	if dst%4 != 0 {
		return errf(opName, cuda.ErrorInvalidValue, "address %#x is not 4-byte aligned", uint64(dst))
	}
	if count == 0 {
		return nil
	}
	return n.syncCopy(opName, i, [][2]uint64{{uint64(dst), count * 4}}, func(dev cuda.Device) error {
		return n.memset(dev, dst, count*4, pat32(v))
	})
}

// MemsetD8Async is cuMemsetD8Async.
func (n *Node) MemsetD8Async(dst cuda.DevicePtr, v uint8, count uint64, s cuda.Stream) (err error) {
	const opName = "cuMemsetD8Async"
	i, err := n.enter(opName, -1, uint64(s), uint64(dst), count)
	if err != nil {
		return err
	}
	defer n.leave(i, &err)
	if count == 0 {
		return nil
	}
	return n.asyncCopy(opName, i, s, [][2]uint64{{uint64(dst), count}}, func(dev cuda.Device) error {
		return n.memset(dev, dst, count, []byte{v})
	})
}

// MemsetD32Async is cuMemsetD32Async.
func (n *Node) MemsetD32Async(dst cuda.DevicePtr, v uint32, count uint64, s cuda.Stream) (err error) {
	const opName = "cuMemsetD32Async"
	i, err := n.enter(opName, -1, uint64(s), uint64(dst), count*4)
	if err != nil {
		return err
	}
	defer n.leave(i, &err)
	if dst%4 != 0 {
		return errf(opName, cuda.ErrorInvalidValue, "address %#x is not 4-byte aligned", uint64(dst))
	}
	if count == 0 {
		return nil
	}
	return n.asyncCopy(opName, i, s, [][2]uint64{{uint64(dst), count * 4}}, func(dev cuda.Device) error {
		return n.memset(dev, dst, count*4, pat32(v))
	})
}
