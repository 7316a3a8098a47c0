package team

import (
	"errors"
	"fmt"
	"unsafe"

	"github.com/nvls-go/nvls/cuda"
	"github.com/nvls-go/nvls/kernels"
)

// Typed host-device copies of a team's buffers. They run on the rank's
// worker, whose thread has the rank's context current, so they may be
// called from any goroutine (cuda.CopyHtoD and CopyDtoH need that
// context current on the calling thread); not from inside a Job, whose
// worker they would wait for: there, use cuda.CopyHtoD. The element
// types are kernels.Elem: float32, int32, uint32, uint64, and the 16-bit
// floats as kernels.Float16 or kernels.BFloat16.

// ErrBadCopy matches the errors of CopyIn and CopyOut about their
// arguments: the zero Buffer, a freed one, a local rank out of range, more
// elements than the buffer holds.
var ErrBadCopy = errors.New("team: bad copy")

// CopyIn copies src to the start of local rank localRank's copy of b, and
// returns once the data is on the device. It does not wait for work on
// streams that do not synchronize with the default stream (those made
// with cuda.StreamNonBlocking): a collective still running there on b may
// race with it; Sync first.
func CopyIn[T kernels.Elem](b Buffer, localRank int, src []T) error {
	n := uint64(len(src)) * uint64(unsafe.Sizeof(*new(T)))
	return b.copy("CopyIn", localRank, n, func(d cuda.Driver, p cuda.DevicePtr) error {
		if err := d.MemcpyHtoD(p, unsafe.Pointer(unsafe.SliceData(src)), n); err != nil {
			return err
		}
		// From pageable memory the copy may return before its DMA is
		// done, ordered only on the legacy default stream: wait for it,
		// so that a collective on any stream sees the data.
		return d.StreamSynchronize(0)
	})
}

// CopyOut copies the first len(dst) elements of local rank localRank's
// copy of b into dst. Like CopyIn it does not wait for non-blocking
// streams: Sync the collectives that write b first.
func CopyOut[T kernels.Elem](dst []T, b Buffer, localRank int) error {
	n := uint64(len(dst)) * uint64(unsafe.Sizeof(*new(T)))
	return b.copy("CopyOut", localRank, n, func(d cuda.Driver, p cuda.DevicePtr) error {
		return d.MemcpyDtoH(unsafe.Pointer(unsafe.SliceData(dst)), p, n)
	})
}

// copy runs fn with the address of local rank l's copy of b on that
// rank's worker, after checking that b is a live buffer of an open team,
// l one of its local ranks and n bytes within b. n == 0 copies nothing.
func (b Buffer) copy(op string, l int, n uint64, fn func(cuda.Driver, cuda.DevicePtr) error) error {
	t := b.t
	if t == nil {
		return tagged(ErrBadCopy, "team: %s: the zero Buffer (Alloc did not make it)", op)
	}
	if l < 0 || l >= len(t.ranks) {
		return tagged(ErrBadCopy, "team: %s: local rank %d: the team has local ranks 0 to %d", op, l, len(t.ranks)-1)
	}
	if n > b.size {
		return tagged(ErrBadCopy, "team: %s: %d bytes do not fit in the %d-byte buffer at data offset %d", op, n, b.size, b.off)
	}
	// runMu: Close waits for the copy, and a closed team's workers are
	// gone.
	t.runMu.Lock()
	defer t.runMu.Unlock()
	if err := t.usable(); err != nil {
		return err
	}
	if live, ok := t.bufferAt(b.off, b.size); !ok || live.id != b.id || live.off != b.off {
		return tagged(ErrBadCopy, "team: %s: the buffer at data offset %d (%d bytes) is not live: freed", op, b.off, b.size)
	}
	if n == 0 {
		return nil
	}
	r := t.ranks[l]
	p := b.Ptr(l)
	if err := r.w.do(func() error { return fn(t.d, p) }); err != nil {
		return fmt.Errorf("team: %s: rank %d (device %d): %d bytes at %#x: %w", op, r.rank, r.dev, n, uint64(p), err)
	}
	return nil
}
