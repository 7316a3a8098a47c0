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

// span is a device range a copy or set touches.
type span struct {
	p    cuda.DevicePtr
	size uint64
}

// checkSpans checks, when the call is made, that every span is memory
// copies may touch (see validSpan).
func (c *call) checkSpans(spans []span) error {
	for _, sp := range spans {
		if err := c.n.validSpan(c.op, sp.p, sp.size); err != nil {
			return err
		}
	}
	return nil
}

// syncCopy runs a synchronous copy or set (run, as dev sees memory) on the
// current context's legacy stream and waits for it. Spans of size 0 do
// nothing.
func (c *call) syncCopy(run func(dev cuda.Device) error, spans ...span) error {
	if spans[0].size == 0 {
		return nil
	}
	ctx, err := c.current()
	if err != nil {
		return err
	}
	if err := ctx.stickyErr(c.op); err != nil {
		return err
	}
	if err := c.checkSpans(spans); err != nil {
		return err
	}
	st, err := c.n.streamFor(c.op, 0)
	if err != nil {
		return err
	}
	if st.capturing() {
		return c.errf(cuda.ErrorCaptureUnsupported, "synchronous copy on a capturing stream")
	}
	return asCallErr(c.op, st.submitWait(c.op, func() error { return run(ctx.dev) }))
}

// asyncCopy enqueues a copy or set (run, as dev sees memory) on stream s.
// Spans of size 0 do nothing.
func (c *call) asyncCopy(s cuda.Stream, run func(dev cuda.Device) error, spans ...span) error {
	if spans[0].size == 0 {
		return nil
	}
	if _, err := c.n.cur(c.op); err != nil {
		return err
	}
	st, err := c.stream(s)
	if err != nil {
		return err
	}
	if err := st.ctx.stickyErr(c.op); err != nil {
		return err
	}
	if err := c.checkSpans(spans); err != nil {
		return err
	}
	dev := st.ctx.dev
	return st.submit(c.op, func() error { return asCallErr(c.op, run(dev)) })
}

// MemcpyHtoD is cuMemcpyHtoD (synchronous; ordered on the legacy stream).
func (n *Node) MemcpyHtoD(dst cuda.DevicePtr, src unsafe.Pointer, size uint64) error {
	return n.call("cuMemcpyHtoD", -1, 0, uint64(dst), size).do(func(c *call) error {
		return c.syncCopy(func(dev cuda.Device) error {
			return n.mem(dev).Store(dst, hostBytes(src, size))
		}, span{dst, size})
	})
}

// MemcpyDtoH is cuMemcpyDtoH.
func (n *Node) MemcpyDtoH(dst unsafe.Pointer, src cuda.DevicePtr, size uint64) error {
	return n.call("cuMemcpyDtoH", -1, 0, uint64(src), size).do(func(c *call) error {
		return c.syncCopy(func(dev cuda.Device) error {
			return n.mem(dev).Load(src, hostBytes(dst, size))
		}, span{src, size})
	})
}

// MemcpyDtoD is cuMemcpyDtoD: the current context's device needs access
// to both ranges.
func (n *Node) MemcpyDtoD(dst, src cuda.DevicePtr, size uint64) error {
	return n.call("cuMemcpyDtoD", -1, uint64(src), uint64(dst), size).do(func(c *call) error {
		return c.syncCopy(func(dev cuda.Device) error {
			return n.copyDtoD(dev, dst, src, size)
		}, span{dst, size}, span{src, size})
	})
}

// MemcpyHtoDAsync is cuMemcpyHtoDAsync: src is read when the stream
// reaches the copy, so it must stay alive until then.
func (n *Node) MemcpyHtoDAsync(dst cuda.DevicePtr, src unsafe.Pointer, size uint64, s cuda.Stream) error {
	return n.call("cuMemcpyHtoDAsync", -1, uint64(s), uint64(dst), size).do(func(c *call) error {
		return c.asyncCopy(s, func(dev cuda.Device) error {
			return n.mem(dev).Store(dst, hostBytes(src, size))
		}, span{dst, size})
	})
}

// MemcpyDtoHAsync is cuMemcpyDtoHAsync.
func (n *Node) MemcpyDtoHAsync(dst unsafe.Pointer, src cuda.DevicePtr, size uint64, s cuda.Stream) error {
	return n.call("cuMemcpyDtoHAsync", -1, uint64(s), uint64(src), size).do(func(c *call) error {
		return c.asyncCopy(s, func(dev cuda.Device) error {
			return n.mem(dev).Load(src, hostBytes(dst, size))
		}, span{src, size})
	})
}

// MemcpyDtoDAsync is cuMemcpyDtoDAsync: the stream's device needs access
// to both ranges.
func (n *Node) MemcpyDtoDAsync(dst, src cuda.DevicePtr, size uint64, s cuda.Stream) error {
	return n.call("cuMemcpyDtoDAsync", -1, uint64(src), uint64(dst), size).do(func(c *call) error {
		return c.asyncCopy(s, func(dev cuda.Device) error {
			return n.copyDtoD(dev, dst, src, size)
		}, span{dst, size}, span{src, size})
	})
}

// MemsetD8 is cuMemsetD8.
func (n *Node) MemsetD8(dst cuda.DevicePtr, v uint8, count uint64) error {
	return n.call("cuMemsetD8", -1, uint64(v), uint64(dst), count).do(func(c *call) error {
		return c.syncCopy(func(dev cuda.Device) error {
			return n.memset(dev, dst, count, []byte{v})
		}, span{dst, count})
	})
}

func pat32(v uint32) []byte {
	b := make([]byte, 4)
	binary.LittleEndian.PutUint32(b, v)
	return b
}

// MemsetD32 is cuMemsetD32: count 32-bit words; dst 4-byte aligned.
func (n *Node) MemsetD32(dst cuda.DevicePtr, v uint32, count uint64) error {
	return n.call("cuMemsetD32", -1, uint64(v), uint64(dst), count*4).do(func(c *call) error {
		if dst%4 != 0 {
			return c.errf(cuda.ErrorInvalidValue, "address %#x is not 4-byte aligned", uint64(dst))
		}
		return c.syncCopy(func(dev cuda.Device) error {
			return n.memset(dev, dst, count*4, pat32(v))
		}, span{dst, count * 4})
	})
}

// MemsetD8Async is cuMemsetD8Async.
func (n *Node) MemsetD8Async(dst cuda.DevicePtr, v uint8, count uint64, s cuda.Stream) error {
	return n.call("cuMemsetD8Async", -1, uint64(s), uint64(dst), count).do(func(c *call) error {
		return c.asyncCopy(s, func(dev cuda.Device) error {
			return n.memset(dev, dst, count, []byte{v})
		}, span{dst, count})
	})
}

// MemsetD32Async is cuMemsetD32Async.
func (n *Node) MemsetD32Async(dst cuda.DevicePtr, v uint32, count uint64, s cuda.Stream) error {
	return n.call("cuMemsetD32Async", -1, uint64(s), uint64(dst), count*4).do(func(c *call) error {
		if dst%4 != 0 {
			return c.errf(cuda.ErrorInvalidValue, "address %#x is not 4-byte aligned", uint64(dst))
		}
		return c.asyncCopy(s, func(dev cuda.Device) error {
			return n.memset(dev, dst, count*4, pat32(v))
		}, span{dst, count * 4})
	})
}
