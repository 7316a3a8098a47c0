package collectives

import (
	"errors"
	"fmt"
	"unsafe"

	"github.com/nvls-go/nvls/cuda"
	"github.com/nvls-go/nvls/kernels"
	"github.com/nvls-go/nvls/team"
)

// Type is the constraint of a Buffer's elements: float32, kernels.Float16,
// kernels.BFloat16, int32, uint32 and uint64, each standing for one
// element type (kernels.DTypeOf), so that a collective on a Buffer takes
// its element type from the buffer's Go type.
type Type = kernels.Type

// Buffer is Len elements of T on every local rank of a team: one copy per
// local rank (Ptr), the unit the typed collectives (AllReduce, ...) take.
// Its element type and length come with it, so a collective cannot
// reduce a float32 buffer as f16 or read past its end.
//
// NewBuffer allocates it in the team's workspace (symmetric: the same
// offset on every rank, used without a copy); WrapBuffer takes device
// memory nvls did not allocate (copied through the workspace). Slice is
// a view of part of a buffer. Close frees what NewBuffer allocated.
type Buffer[T Type] struct {
	t    *team.Team
	tb   team.Buffer      // NewBuffer's allocation; zero for WrapBuffer's and views
	ptrs []cuda.DevicePtr // local rank l's first element
	n    int
}

// NewBuffer allocates a buffer of n elements of T in team t's workspace
// (team.Alloc), at the same offset on every rank. With several processes
// (team.NewRank), every process makes the same NewBuffer and Close calls
// in the same order, as for team.Alloc. The caller closes it.
func NewBuffer[T Type](t *team.Team, n int) (*Buffer[T], error) {
	if n <= 0 {
		return nil, fmt.Errorf("collectives: NewBuffer: %d elements: %w", n, ErrInvalid)
	}
	nb := uint64(n) * elemSize[T]()
	tb, err := t.Alloc(nb)
	if errors.Is(err, team.ErrNoSpace) {
		// Name what fits: the data area grown by this buffer holds it,
		// beside the Comm's areas (WorkspaceBytes) and the buffers in use.
		fit := t.DataSize() + (nb+team.Alignment-1)/team.Alignment*team.Alignment
		return nil, fmt.Errorf("collectives: NewBuffer of %d %v (%d bytes): %w; the team's data area is %d bytes, "+
			"of which each Comm takes collectives.WorkspaceBytes: team.WithWorkspaceSize(%d) fits this buffer too",
			n, kernels.DTypeOf[T](), nb, err, t.DataSize(), fit)
	}
	if err != nil {
		return nil, fmt.Errorf("collectives: NewBuffer of %d %v: %w", n, kernels.DTypeOf[T](), err)
	}
	b := &Buffer[T]{t: t, tb: tb, ptrs: make([]cuda.DevicePtr, t.NumLocal()), n: n}
	for l := range b.ptrs {
		b.ptrs[l] = tb.Ptr(l)
	}
	return b, nil
}

// WrapBuffer takes device memory that nvls did not allocate (cuMemAlloc's,
// a framework's tensor): ptrs[l] is n elements of T on local rank l's
// device, one pointer per local rank. The collectives copy such memory
// through the team's staging area, so it works at any element-aligned
// address but costs a copy each way; NewBuffer's memory is used in place.
// Close does not free the memory: it stays the caller's.
func WrapBuffer[T Type](t *team.Team, ptrs []cuda.DevicePtr, n int) (*Buffer[T], error) {
	if len(ptrs) != t.NumLocal() {
		return nil, fmt.Errorf("collectives: WrapBuffer: %d pointers for %d local ranks (one per local rank): %w", len(ptrs), t.NumLocal(), ErrInvalid)
	}
	if n <= 0 {
		return nil, fmt.Errorf("collectives: WrapBuffer: %d elements: %w", n, ErrInvalid)
	}
	for l, p := range ptrs {
		if p == 0 || uint64(p)%elemSize[T]() != 0 {
			return nil, fmt.Errorf("collectives: WrapBuffer: local rank %d's pointer %#x is not an aligned %v address: %w", l, uint64(p), kernels.DTypeOf[T](), ErrInvalid)
		}
	}
	return &Buffer[T]{t: t, ptrs: append([]cuda.DevicePtr(nil), ptrs...), n: n}, nil
}

func elemSize[T Type]() uint64 { return uint64(unsafe.Sizeof(*new(T))) }

// Len is the number of elements on each rank.
func (b *Buffer[T]) Len() int { return b.n }

// DType is the element type, from T.
func (b *Buffer[T]) DType() DType { return kernels.DTypeOf[T]() }

// Ptr is local rank l's copy's first element.
func (b *Buffer[T]) Ptr(l int) cuda.DevicePtr { return b.ptrs[l] }

// Slice is the view of elements [lo, hi) of b on every rank: it shares
// b's memory and needs no Close. A view into a NewBuffer buffer that
// starts on a 16-byte boundary (the kernels' vectors) is used in place;
// one that starts elsewhere runs through the staging area, as WrapBuffer's
// memory does.
func (b *Buffer[T]) Slice(lo, hi int) (*Buffer[T], error) {
	if lo < 0 || hi > b.n || lo >= hi {
		return nil, fmt.Errorf("collectives: Slice(%d, %d) of a buffer of %d elements: %w", lo, hi, b.n, ErrInvalid)
	}
	v := &Buffer[T]{t: b.t, ptrs: make([]cuda.DevicePtr, len(b.ptrs)), n: hi - lo}
	for l, p := range b.ptrs {
		v.ptrs[l] = p + cuda.DevicePtr(uint64(lo)*elemSize[T]())
	}
	return v, nil
}

// Own is the view of each rank's own slot of n elements: on team rank r
// it starts at element r*n. It is the in-place layout of the sliced
// collectives: ReduceScatter(b, b.Own(n)) and AllGather(b.Own(n), b)
// with b of Size x n elements.
func (b *Buffer[T]) Own(n int) (*Buffer[T], error) {
	size := b.t.Size()
	if n <= 0 || n*size > b.n {
		return nil, fmt.Errorf("collectives: Own(%d) of a buffer of %d elements over %d ranks: %w", n, b.n, size, ErrInvalid)
	}
	v := &Buffer[T]{t: b.t, ptrs: make([]cuda.DevicePtr, len(b.ptrs)), n: n}
	for l, p := range b.ptrs {
		v.ptrs[l] = p + cuda.DevicePtr(uint64(b.t.Rank(l)*n)*elemSize[T]())
	}
	return v, nil
}

// ErrBadCopy matches the argument errors of Buffer.CopyIn and CopyOut.
var ErrBadCopy = team.ErrBadCopy

// CopyIn copies src to the start of local rank l's copy and returns once
// it is on the device; from any goroutine. Like team.CopyIn it does not
// wait for non-blocking streams: Sync the collectives that use b first.
func (b *Buffer[T]) CopyIn(l int, src []T) error {
	nb := uint64(len(src)) * elemSize[T]()
	return b.copy("CopyIn", l, len(src), func(d cuda.Driver, p cuda.DevicePtr) error {
		if err := d.MemcpyHtoD(p, unsafe.Pointer(unsafe.SliceData(src)), nb); err != nil {
			return err
		}
		return d.StreamSynchronize(0) // pageable memory: the DMA may still run
	})
}

// CopyOut copies the first len(dst) elements of local rank l's copy into
// dst; from any goroutine. Sync the collectives that write b first.
func (b *Buffer[T]) CopyOut(dst []T, l int) error {
	nb := uint64(len(dst)) * elemSize[T]()
	return b.copy("CopyOut", l, len(dst), func(d cuda.Driver, p cuda.DevicePtr) error {
		return d.MemcpyDtoH(unsafe.Pointer(unsafe.SliceData(dst)), p, nb)
	})
}

// copy runs fn on local rank l's worker (its device's context current)
// with the address of its copy, after checking l and n.
func (b *Buffer[T]) copy(op string, l, n int, fn func(cuda.Driver, cuda.DevicePtr) error) error {
	if l < 0 || l >= len(b.ptrs) {
		return fmt.Errorf("collectives: %s: local rank %d: the team has local ranks 0 to %d: %w", op, l, len(b.ptrs)-1, ErrBadCopy)
	}
	if n > b.n {
		return fmt.Errorf("collectives: %s: %d elements do not fit in a buffer of %d: %w", op, n, b.n, ErrBadCopy)
	}
	if n == 0 {
		return nil
	}
	d, p := b.t.Driver(), b.ptrs[l]
	err := b.t.Run(team.JobFunc(func(k int) error {
		if k != l {
			return nil
		}
		return fn(d, p)
	}))
	if err != nil {
		return fmt.Errorf("collectives: %s: rank %d: %d %v at %#x: %w", op, b.t.Rank(l), n, b.DType(), uint64(p), err)
	}
	return nil
}

// Close frees the workspace memory NewBuffer allocated; for WrapBuffer's
// buffers and views it does nothing. Closing twice is an error.
func (b *Buffer[T]) Close() error {
	if b.tb.Team() == nil {
		return nil
	}
	err := b.t.Free(b.tb)
	if err != nil && !errors.Is(err, team.ErrClosed) {
		return fmt.Errorf("collectives: Buffer.Close: %w", err)
	}
	return nil
}
