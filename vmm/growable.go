package vmm

import (
	"fmt"
	"io"
	"sync"

	"github.com/nvls-go/nvls/cuda"
)

// GrowableOptions configure NewGrowable.
type GrowableOptions struct {
	// Device is where the physical chunks live.
	Device cuda.Device
	// Access lists the devices granted Flags on every chunk (per
	// allocation mappings, not cuCtxEnablePeerAccess); nil means Device
	// alone.
	Access []cuda.Device
	// Flags are the rights granted (cuda.AccessReadWrite when zero).
	Flags cuda.AccessFlags
	// Chunk is the unit in which physical memory is added and removed: a
	// multiple of Device's minimum granularity (default: its recommended
	// granularity).
	Chunk uint64
	// Reserve is the size of the virtual range reserved up front, rounded
	// up to Chunk (default: 4 times the initial size, at least 4 chunks).
	// The base address stays put while the length fits in it.
	Reserve uint64
	// Coalesce makes each Grow add one allocation for all the chunks it
	// needs (one split where the range is made of two reservations),
	// instead of one allocation per chunk: fewer driver calls, but Shrink
	// can only release whole allocations.
	Coalesce bool
	// Handles, Compress, GPUDirectRDMA: as in AllocOptions, for every
	// chunk.
	Handles       cuda.HandleType
	Compress      bool
	GPUDirectRDMA bool
	// OnMove, when set, is called (outside the Growable's lock) after a
	// Grow had to move the buffer to a new base address.
	OnMove func(old, new cuda.DevicePtr)
}

// Growable is device memory that grows and shrinks without copying: a
// GPU realloc. It reserves a virtual range up front and maps physical
// chunks at its end as it grows, so Ptr stays the same while the length
// fits in the reservation.
//
// When the reservation is full, Grow first asks the driver for the range
// right after it; if the driver grants that address the buffer goes on
// over two reservations back to back and Ptr stays. If the driver places
// the range elsewhere, Grow reserves one range big enough for all, maps
// the existing chunks into it in order (the memory is not copied), grants
// access, and unmaps and frees the old ranges: then Ptr changes,
// Generation increases by one and OnMove is called. Code that keeps
// pointers into the buffer compares Generation before using them.
//
// Len is the length in bytes asked for; Mapped is the physical memory
// behind it (Len rounded up to the chunk, or to the allocations with
// Coalesce); Cap is the reserved range. Len <= Mapped <= Cap always.
//
// A Growable is safe for concurrent use; no method needs a current
// context. Bytes past Len (up to Mapped) are accessible but are lost on
// Shrink.
type Growable struct {
	mu       sync.Mutex
	cp       chunkProp
	dev      cuda.Device
	chunk    uint64
	align    uint64
	coalesce bool
	onMove   func(old, new cuda.DevicePtr)

	ranges  []*Reservation // back to back from the base
	caps    uint64         // sum of the ranges' sizes
	segs    []*segment     // in order, contiguous from offset 0
	mapped  uint64         // sum of the segments' sizes
	length  uint64
	gen     uint64
	stale   []io.Closer // what failed to be released; Close retries
	closing closing
}

// NewGrowable makes a Growable of initial bytes (which may be 0) on
// opts.Device.
func NewGrowable(d cuda.Driver, initial uint64, opts GrowableOptions) (*Growable, error) {
	if d == nil {
		return nil, fmt.Errorf("vmm: growable: %w (nil driver)", ErrNilHandle)
	}
	cp, gmin, chunk, err := oneDevice(d, "growable", opts.Device, opts.Access, opts.Flags, opts.Chunk,
		AllocOptions{Handles: opts.Handles, Compress: opts.Compress, GPUDirectRDMA: opts.GPUDirectRDMA})
	if err != nil {
		return nil, err
	}
	first, err := AlignUp(initial, chunk)
	if err != nil {
		return nil, err
	}
	reserve := opts.Reserve
	if reserve == 0 {
		base := max(first, chunk)
		if reserve, err = mulOK(base, 4); err != nil {
			return nil, err
		}
	}
	if reserve, err = AlignUp(max(reserve, first), chunk); err != nil {
		return nil, err
	}
	r, err := Reserve(d, reserve, gmin, 0)
	if err != nil {
		return nil, err
	}
	g := &Growable{
		cp:       cp,
		dev:      opts.Device,
		chunk:    chunk,
		align:    gmin,
		coalesce: opts.Coalesce,
		onMove:   opts.OnMove,
		ranges:   []*Reservation{r},
		caps:     reserve,
	}
	g.cp.keep = func(left []io.Closer) { g.stale = append(g.stale, left...) }
	if initial > 0 {
		if err := g.Grow(initial); err != nil {
			return nil, closeFirst(err, g)
		}
	}
	return g, nil
}

// Ptr is the base address. It changes only when a Grow had to move the
// buffer (Generation tells).
func (g *Growable) Ptr() cuda.DevicePtr {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.ranges[0].Ptr()
}

// Len is the length in bytes.
func (g *Growable) Len() uint64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.length
}

// Mapped is the physical memory mapped behind Len, in bytes.
func (g *Growable) Mapped() uint64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.mapped
}

// Cap is the reserved virtual range in bytes: Len can grow to it without
// the base moving.
func (g *Growable) Cap() uint64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.caps
}

// Generation counts the moves of the base address (0 until the first).
func (g *Growable) Generation() uint64 {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.gen
}

// Chunk is the unit of growth in bytes.
func (g *Growable) Chunk() uint64 { return g.chunk }

// Device is the device whose memory backs the buffer.
func (g *Growable) Device() cuda.Device { return g.dev }

// Reservations is the number of reserved ranges the buffer spans (more
// than one after the driver granted the range right after the end).
func (g *Growable) Reservations() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.ranges)
}

// Allocations is the number of physical allocations mapped.
func (g *Growable) Allocations() int {
	g.mu.Lock()
	defer g.mu.Unlock()
	return len(g.segs)
}

// Compressed reports whether every chunk mapped was granted compression
// (false when there are none).
func (g *Growable) Compressed() bool {
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, s := range g.segs {
		if !s.a.Compressed() {
			return false
		}
	}
	return len(g.segs) > 0
}

// DeviceOf returns the allocation behind byte off (for tests and
// introspection): its device and handle.
func (g *Growable) DeviceOf(off uint64) (cuda.Device, cuda.MemHandle, error) {
	g.mu.Lock()
	defer g.mu.Unlock()
	for _, s := range g.segs {
		if off >= s.off && off-s.off < s.size() {
			return s.a.Device(), s.a.Handle(), nil
		}
	}
	return 0, 0, fmt.Errorf("vmm: offset %d of a growable buffer with %d bytes mapped: %w", off, g.mapped, ErrOutOfRange)
}

// vaPlan is a change of the virtual range that Grow needs, not yet
// committed: either an extension right after the end, or a new range
// with the existing chunks already mapped into it.
type vaPlan struct {
	appended  *Reservation
	moved     *Reservation
	movedMaps []*Mapping
}

// closers lists what the plan took, in the order to give it back.
func (p *vaPlan) closers() []io.Closer {
	if p == nil {
		return nil
	}
	var cs []io.Closer
	if p.appended != nil {
		cs = append(cs, p.appended)
	}
	for i := len(p.movedMaps) - 1; i >= 0; i-- {
		cs = append(cs, p.movedMaps[i])
	}
	if p.moved != nil {
		cs = append(cs, p.moved)
	}
	return cs
}

// Grow adds n bytes at the end. New chunks are created on the device,
// mapped after the existing ones and made accessible; the contents of the
// existing bytes are untouched (never copied). On failure nothing changes:
// what Grow made is undone and Len, Cap and Ptr are as before.
func (g *Growable) Grow(n uint64) error {
	g.mu.Lock()
	moved, oldPtr, newPtr, err := g.grow(n)
	onMove := g.onMove
	g.mu.Unlock()
	if moved && onMove != nil {
		onMove(oldPtr, newPtr)
	}
	return err
}

func (g *Growable) grow(n uint64) (moved bool, oldPtr, newPtr cuda.DevicePtr, err error) {
	if g.closing.started {
		return false, 0, 0, fmt.Errorf("vmm: grow: %w", ErrClosed)
	}
	if n == 0 {
		return false, 0, 0, nil
	}
	newLen, err := addOK(g.length, n)
	if err != nil {
		return false, 0, 0, fmt.Errorf("vmm: grow by %d: %w", n, err)
	}
	target, err := AlignUp(newLen, g.chunk)
	if err != nil {
		return false, 0, 0, fmt.Errorf("vmm: grow by %d: %w", n, err)
	}
	if target <= g.mapped {
		g.length = newLen
		return false, 0, 0, nil
	}
	if len(g.stale) > 0 {
		// Leftovers of an earlier failure may sit where the new chunks go.
		g.stale, _ = closeAll(g.stale)
	}
	var plan *vaPlan
	if target > g.caps {
		if plan, err = g.planVA(target); err != nil {
			return false, 0, 0, err
		}
	}
	segs, err := g.makeSegments(plan, g.mapped, target)
	if err != nil {
		return false, 0, 0, g.cp.undo(err, plan.closers()...)
	}
	oldPtr = g.ranges[0].Ptr()
	g.commit(plan)
	g.segs = append(g.segs, segs...)
	g.mapped = target
	g.length = newLen
	newPtr = g.ranges[0].Ptr()
	return plan != nil && plan.moved != nil, oldPtr, newPtr, nil
}

// planVA obtains the virtual range to grow to target bytes: the range
// right after the end if the driver grants it, else a new one with the
// existing chunks mapped into it.
func (g *Growable) planVA(target uint64) (*vaPlan, error) {
	d := g.cp.d
	double, err := mulOK(g.caps, 2)
	if err != nil {
		double = target
	}
	newCap, err := AlignUp(max(target, double), g.chunk)
	if err != nil {
		return nil, fmt.Errorf("vmm: grow to %d bytes: %w", target, err)
	}
	last := g.ranges[len(g.ranges)-1]
	end := last.End()
	ext, err := Reserve(d, newCap-g.caps, g.align, end)
	if err != nil {
		return nil, fmt.Errorf("vmm: grow: extend the range after %#x: %w", end, err)
	}
	if ext.Ptr() == end {
		log().Debug("growable: range extended in place", "base", g.ranges[0].Ptr(), "added", ext.Size())
		return &vaPlan{appended: ext}, nil
	}
	if err := ext.Close(); err != nil {
		g.stale = append(g.stale, ext)
		log().Warn("growable: freeing a misplaced range failed; Close retries", "err", err)
	}
	nr, err := Reserve(d, newCap, g.align, 0)
	if err != nil {
		return nil, fmt.Errorf("vmm: grow: reserve %d bytes to move to: %w", newCap, err)
	}
	plan := &vaPlan{moved: nr}
	for _, s := range g.segs {
		m, err := Map(nr, s.off, s.a.Handle(), s.size())
		if err != nil {
			return nil, g.cp.undo(err, plan.closers()...)
		}
		plan.movedMaps = append(plan.movedMaps, m)
		if err := setAccessChecked(d, m.Ptr(), m.Size(), g.cp.access, g.cp.flags); err != nil {
			return nil, g.cp.undo(err, plan.closers()...)
		}
	}
	return plan, nil
}

// locate returns the reservation holding logical offset off and the
// offset in it, and how many bytes from off remain in that reservation,
// given the plan.
func (g *Growable) locate(plan *vaPlan, off uint64) (*Reservation, uint64, uint64) {
	if plan != nil && plan.moved != nil {
		return plan.moved, off, plan.moved.Size() - off
	}
	start := uint64(0)
	for _, r := range g.ranges {
		if off < start+r.Size() {
			return r, off - start, start + r.Size() - off
		}
		start += r.Size()
	}
	r := plan.appended
	return r, off - start, start + r.Size() - off
}

// makeSegments creates and maps the chunks for [from, to).
func (g *Growable) makeSegments(plan *vaPlan, from, to uint64) ([]*segment, error) {
	var segs []*segment
	undo := func(err error) ([]*segment, error) {
		var cs []io.Closer
		for i := len(segs) - 1; i >= 0; i-- {
			cs = append(cs, segs[i].m, segs[i].a)
		}
		return nil, g.cp.undo(err, cs...)
	}
	for off := from; off < to; {
		r, roff, room := g.locate(plan, off)
		size := min(room, to-off)
		if !g.coalesce {
			size = min(size, g.chunk)
		}
		s, err := g.cp.newSegment(g.dev, size, r, roff, off)
		if err != nil {
			return undo(fmt.Errorf("vmm: grow to %d bytes: %w", to, err))
		}
		segs = append(segs, s)
		off += size
	}
	return segs, nil
}

// commit makes the plan the Growable's range.
func (g *Growable) commit(plan *vaPlan) {
	switch {
	case plan == nil:
	case plan.appended != nil:
		g.ranges = append(g.ranges, plan.appended)
		g.caps += plan.appended.Size()
	case plan.moved != nil:
		old := g.ranges[0].Ptr()
		for i, s := range g.segs {
			if err := s.m.Close(); err != nil {
				g.stale = append(g.stale, s.m)
				log().Warn("growable: unmapping a chunk from the old range failed; Close retries", "err", err)
			}
			s.m = plan.movedMaps[i]
		}
		for _, r := range g.ranges {
			if err := r.Close(); err != nil {
				g.stale = append(g.stale, r)
				log().Warn("growable: freeing the old range failed; Close retries", "err", err)
			}
		}
		g.ranges = []*Reservation{plan.moved}
		g.caps = plan.moved.Size()
		g.gen++
		log().Info("growable: moved to a new range", "old", old, "new", plan.moved.Ptr(), "bytes", g.caps, "generation", g.gen)
	}
}

// Shrink removes n bytes from the end and unmaps and releases the chunks
// wholly past the new length (whole allocations, with Coalesce). The
// reserved range stays. On an error, Len, Mapped and the chunks say what
// was done; a chunk whose release failed is released again by Close.
func (g *Growable) Shrink(n uint64) error {
	g.mu.Lock()
	defer g.mu.Unlock()
	if g.closing.started {
		return fmt.Errorf("vmm: shrink: %w", ErrClosed)
	}
	if n > g.length {
		return fmt.Errorf("vmm: shrink by %d bytes a buffer of %d: %w", n, g.length, ErrOutOfRange)
	}
	newLen := g.length - n
	var first error
	for len(g.segs) > 0 {
		s := g.segs[len(g.segs)-1]
		if s.off < newLen {
			break
		}
		if err := s.m.Close(); err != nil {
			g.length = min(g.length, g.mapped)
			return fmt.Errorf("vmm: shrink: %w", err)
		}
		g.segs = g.segs[:len(g.segs)-1]
		g.mapped -= s.size()
		if err := s.a.Close(); err != nil {
			g.stale = append(g.stale, s.a)
			if first == nil {
				first = fmt.Errorf("vmm: shrink: %w", err)
			}
		}
	}
	g.length = newLen
	return first
}

// Close unmaps and releases every chunk and frees the ranges, going on
// past failures and returning the first error. Close again retries only
// what failed; once all is released it returns ErrClosed.
func (g *Growable) Close() error {
	g.mu.Lock()
	defer g.mu.Unlock()
	return g.closing.close("growable", func() []io.Closer {
		var cs []io.Closer
		for i := len(g.segs) - 1; i >= 0; i-- {
			cs = append(cs, g.segs[i].m, g.segs[i].a)
		}
		cs = append(cs, g.stale...)
		for _, r := range g.ranges {
			cs = append(cs, r)
		}
		g.segs, g.stale = nil, nil
		g.length, g.mapped = 0, 0
		return cs
	})
}
