package simdiff

import (
	"fmt"
	"sort"

	"github.com/nvls-go/nvls/cuda"
)

// The model: what a sequence has made, as the generator sees it. Every
// object holds the two sides' handles or addresses ([2]) and whether the
// object exists on each side (a call that succeeded on one side only ends
// the sequence, whose teardown then frees what each side holds).

// ranges is a set of byte offsets, as sorted disjoint half-open intervals.
// It tracks which bytes of memory hold defined contents: fresh device
// memory holds whatever was there before on a GPU (zeros on the
// simulator), so only bytes that a call of the sequence wrote are
// compared.
type ranges []iv

type iv struct{ lo, hi uint64 }

// add marks [lo, hi).
func (r *ranges) add(lo, hi uint64) {
	if lo >= hi {
		return
	}
	out := make(ranges, 0, len(*r)+1)
	for _, x := range *r {
		switch {
		case x.hi < lo || x.lo > hi:
			out = append(out, x)
		default:
			lo, hi = min(lo, x.lo), max(hi, x.hi)
		}
	}
	out = append(out, iv{lo, hi})
	sort.Slice(out, func(i, j int) bool { return out[i].lo < out[j].lo })
	*r = out
}

// remove unmarks [lo, hi).
func (r *ranges) remove(lo, hi uint64) {
	if lo >= hi {
		return
	}
	out := make(ranges, 0, len(*r)+1)
	for _, x := range *r {
		if x.hi <= lo || x.lo >= hi {
			out = append(out, x)
			continue
		}
		if x.lo < lo {
			out = append(out, iv{x.lo, lo})
		}
		if x.hi > hi {
			out = append(out, iv{hi, x.hi})
		}
	}
	*r = out
}

// within returns the marked parts of [lo, hi), shifted by -lo.
func (r ranges) within(lo, hi uint64) ranges {
	var out ranges
	for _, x := range r {
		a, b := max(x.lo, lo), min(x.hi, hi)
		if a < b {
			out = append(out, iv{a - lo, b - lo})
		}
	}
	return out
}

// covers reports whether all of [lo, hi) is marked.
func (r ranges) covers(lo, hi uint64) bool {
	for _, x := range r {
		if x.lo <= lo && x.hi >= hi {
			return true
		}
	}
	return lo >= hi
}

// copyFrom makes [dst, dst+n) of r marked exactly where [src, src+n) of
// from is (a device-to-device copy carries definedness with the bytes).
func (r *ranges) copyFrom(dst uint64, from ranges, src, n uint64) {
	part := from.within(src, src+n)
	r.remove(dst, dst+n)
	for _, x := range part {
		r.add(dst+x.lo, dst+x.hi)
	}
}

// phys is physical memory: a cuMemCreate allocation (reached through one
// or more handles) or the memory of a cuMemAlloc.
type phys struct {
	size uint64
	def  ranges
}

// handle is an allocation handle: made by cuMemCreate or imported. live
// is false once released (a released handle is never passed to a driver:
// the driver's behaviour with one is undefined).
type handle struct {
	id   int
	h    [2]cuda.MemHandle
	ok   [2]bool
	p    *phys
	live bool
	// exportable: made with POSIX FD handles (not imported).
	exportable bool
	// imported: made by cuMemImportFromShareableHandle.
	imported bool
}

// resv is a cuMemAddressReserve range.
type resv struct {
	id   int
	ptr  [2]cuda.DevicePtr
	ok   [2]bool
	size uint64
}

// mapn is a cuMemMap mapping: size bytes of p from aoff, at off of r.
type mapn struct {
	id        int
	r         *resv
	off, size uint64
	hd        *handle
	p         *phys
	aoff      uint64
	ok        [2]bool
	// access is what device 0 was last granted (cuMemSetAccess).
	access cuda.AccessFlags
}

func (m *mapn) ptr(side int) cuda.DevicePtr { return m.r.ptr[side] + cuda.DevicePtr(m.off) }

// memAlloc is a cuMemAlloc or cuMemAllocManaged allocation.
type memAlloc struct {
	id      int
	ptr     [2]cuda.DevicePtr
	ok      [2]bool
	size    uint64
	p       *phys
	managed bool
}

// strm is a stream; index 0 of the model's streams is the legacy default
// stream (handle 0 on both sides).
type strm struct {
	id          int
	h           [2]cuda.Stream
	ok          [2]bool
	nonBlocking bool
	legacy      bool
}

// evt is an event.
type evt struct {
	id       int
	h        [2]cuda.Event
	ok       [2]bool
	flags    uint32
	recorded bool
}

// modl is a loaded module and the functions looked up in it.
type modl struct {
	id    int
	h     [2]cuda.Module
	ok    [2]bool
	image string
	fns   map[string][2]cuda.Function
}

// region is memory that copies and kernels reach: a mapping or a
// cuMemAlloc allocation, as device 0 sees it.
type region struct {
	m  *mapn
	ma *memAlloc
}

func (g region) size() uint64 {
	if g.m != nil {
		return g.m.size
	}
	return g.ma.size
}

func (g region) phys() (*phys, uint64) {
	if g.m != nil {
		return g.m.p, g.m.aoff
	}
	return g.ma.p, 0
}

func (g region) ptr(side int) cuda.DevicePtr {
	if g.m != nil {
		return g.m.ptr(side)
	}
	return g.ma.ptr[side]
}

func (g region) String() string {
	if g.m != nil {
		return fmt.Sprintf("map%d", g.m.id)
	}
	if g.ma.managed {
		return fmt.Sprintf("managed%d", g.ma.id)
	}
	return fmt.Sprintf("alloc%d", g.ma.id)
}

// defined returns the defined bytes of [off, off+n) of g, shifted by -off.
func (g region) defined(off, n uint64) ranges {
	p, base := g.phys()
	return p.def.within(base+off, base+off+n)
}

// write marks [off, off+n) of g defined.
func (g region) write(off, n uint64) {
	p, base := g.phys()
	p.def.add(base+off, base+off+n)
}

// copyTo carries the definedness of [soff, soff+n) of g to [doff, +n) of
// dst.
func (g region) copyTo(soff uint64, dst region, doff, n uint64) {
	sp, sbase := g.phys()
	dp, dbase := dst.phys()
	src := append(ranges(nil), sp.def...)
	dp.def.copyFrom(dbase+doff, src, sbase+soff, n)
}

// model is one sequence's state.
type model struct {
	nextID  int
	handles []*handle
	resvs   []*resv
	maps    []*mapn
	allocs  []*memAlloc
	streams []*strm
	events  []*evt
	modules []*modl
	// tail is the stream that last got work not yet known complete, nil
	// when everything enqueued is complete; all work in flight is ordered
	// before tail's next work (see order). tailEvent, when set, was
	// recorded on tail after its last work.
	tail      *strm
	tailEvent *evt
	// dirty lists what async work wrote, compared at the next sync.
	dirty []span
	// hostReads are async device-to-host copies whose host buffers are
	// compared once the stream is synchronized.
	hostReads []hostRead
	// keep holds the host buffers of async copies until the sequence
	// ends.
	keep [][]byte
}

// span is a range of a region.
type span struct {
	g      region
	off, n uint64
}

type hostRead struct {
	desc string
	buf  [2][]byte
	def  ranges
}

func (m *model) id() int {
	m.nextID++
	return m.nextID
}

// liveHandles are the handles that may be used.
func (m *model) liveHandles() []*handle {
	var out []*handle
	for _, h := range m.handles {
		if h.live {
			out = append(out, h)
		}
	}
	return out
}

// regions are the memory device 0 may copy to and from: mappings with
// read-write access, and cuMemAlloc allocations.
func (m *model) regions() []region {
	var out []region
	for _, x := range m.maps {
		if x.access == cuda.AccessReadWrite {
			out = append(out, region{m: x})
		}
	}
	for _, a := range m.allocs {
		out = append(out, region{ma: a})
	}
	return out
}

// mapsOf are the mappings inside reservation r, by offset.
func (m *model) mapsOf(r *resv) []*mapn {
	var out []*mapn
	for _, x := range m.maps {
		if x.r == r {
			out = append(out, x)
		}
	}
	sort.Slice(out, func(i, j int) bool { return out[i].off < out[j].off })
	return out
}

// holes are the unmapped ranges of reservation r (offset, size), in
// units of g.
func (m *model) holes(r *resv, g uint64) [][2]uint64 {
	var out [][2]uint64
	at := uint64(0)
	for _, x := range m.mapsOf(r) {
		if x.off > at {
			out = append(out, [2]uint64{at, x.off - at})
		}
		at = x.off + x.size
	}
	if at < r.size {
		out = append(out, [2]uint64{at, r.size - at})
	}
	return out
}

func removeItem[T comparable](xs []T, x T) []T {
	for i, y := range xs {
		if y == x {
			return append(xs[:i], xs[i+1:]...)
		}
	}
	return xs
}
