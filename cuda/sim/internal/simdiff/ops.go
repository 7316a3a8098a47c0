package simdiff

import (
	"fmt"
	"os"
	"slices"
	"unsafe"

	"github.com/nvls-go/nvls/cuda"
)

// The operations a sequence draws. Each draws its arguments from the
// model, mostly valid, sometimes invalid in a way the driver documents as
// an error (a probe): never a released handle, a destroyed stream or event,
// an unloaded module, overlapping copies or anything else whose behaviour
// the driver leaves undefined, so that the real driver is never asked to
// crash. An operation returns false when the model offers it nothing to
// act on (the step draws again).

type opDef struct {
	name   string
	weight int
	run    func(r *runner) bool
}

var opTable = []opDef{
	{"memCreate", 6, (*runner).opMemCreate},
	{"release", 2, (*runner).opRelease},
	{"reserve", 4, (*runner).opReserve},
	{"addressFree", 2, (*runner).opAddressFree},
	{"map", 7, (*runner).opMap},
	{"unmap", 2, (*runner).opUnmap},
	{"setAccess", 6, (*runner).opSetAccess},
	{"getAccess", 2, (*runner).opGetAccess},
	{"retain", 1, (*runner).opRetain},
	{"props", 1, (*runner).opProps},
	{"granularity", 1, (*runner).opGranularity},
	{"exportImport", 2, (*runner).opExportImport},
	{"memAlloc", 2, (*runner).opMemAlloc},
	{"memFree", 1, (*runner).opMemFree},
	{"managed", 1, (*runner).opManaged},
	{"htod", 7, (*runner).opHtoD},
	{"dtoh", 4, (*runner).opDtoH},
	{"dtod", 4, (*runner).opDtoD},
	{"memset", 5, (*runner).opMemset},
	{"ctxSync", 1, (*runner).opCtxSync},
	{"memGetInfo", 1, (*runner).opMemGetInfo},
	{"pointerAttr", 2, (*runner).opPointerAttr},
	{"device", 1, (*runner).opDevice},
	{"streamCreate", 2, (*runner).opStreamCreate},
	{"streamDestroy", 1, (*runner).opStreamDestroy},
	{"streamSync", 2, (*runner).opStreamSync},
	{"streamQuery", 2, (*runner).opStreamQuery},
	{"streamGetCtx", 1, (*runner).opStreamGetCtx},
	{"streamWaitEvent", 1, (*runner).opStreamWaitEvent},
	{"eventCreate", 2, (*runner).opEventCreate},
	{"eventRecord", 2, (*runner).opEventRecord},
	{"eventQuery", 1, (*runner).opEventQuery},
	{"eventSync", 1, (*runner).opEventSync},
	{"elapsed", 1, (*runner).opElapsed},
	{"eventDestroy", 1, (*runner).opEventDestroy},
	{"capture", 2, (*runner).opCapture},
	{"moduleLoad", 1, (*runner).opModuleLoad},
	{"getFunction", 1, (*runner).opGetFunction},
	{"moduleUnload", 1, (*runner).opModuleUnload},
	{"launch", 4, (*runner).opLaunch},
}

var opWeights = func() int {
	t := 0
	for _, o := range opTable {
		t += o.weight
	}
	return t
}()

// step draws and runs one operation.
func (r *runner) step() {
	for range 20 {
		k := r.rng.IntN(opWeights)
		for _, o := range opTable {
			if k < o.weight {
				if o.run(r) {
					return
				}
				break
			}
			k -= o.weight
		}
	}
}

func (r *runner) chance(p float64) bool { return r.rng.Float64() < p }

func pick[T any](r *runner, xs []T) T { return xs[r.rng.IntN(len(xs))] }

// probe: with probability p, run an invalid variant of an operation.
func (r *runner) probe(p float64) bool { return r.chance(p) }

func alignUp(v, a uint64) uint64 { return (v + a - 1) / a * a }

func mib(n uint64) string {
	if n == 0 {
		return "0"
	}
	if n%(1<<20) == 0 {
		return fmt.Sprintf("%d MiB", n>>20)
	}
	return fmt.Sprintf("%d B", n)
}

// ---------------------------------------------------------------------------
// Virtual memory management.

func (r *runner) opMemCreate() bool {
	k := uint64(1 + r.rng.IntN(4))
	size := k * r.gran
	ht := cuda.HandleNone
	if r.chance(0.5) {
		ht = cuda.HandlePosixFD
	}
	prop := cuda.DeviceAllocationProp(0, ht)
	if r.probe(0.12) {
		switch r.rng.IntN(4) {
		case 0:
			size = r.gran / 2
		case 1:
			prop.Location.ID = int32(r.devs)
		case 2:
			prop.Type = 0
		case 3:
			prop.RequestedHandleTypes = cuda.HandleFabric
		}
	}
	hd := &handle{id: r.m.id(), exportable: ht == cuda.HandlePosixFD}
	desc := fmt.Sprintf("cuMemCreate(%s, type %d, device %d, handles %v) -> h%d", mib(size), prop.Type, prop.Location.ID, prop.RequestedHandleTypes, hd.id)
	rs := r.call(desc, false, func(i int, s *side) res {
		p := prop
		if p.Location.ID == 0 {
			p.Location.ID = int32(s.Dev)
		}
		h, err := s.D.MemCreate(size, &p)
		hd.h[i], hd.ok[i] = h, err == nil
		return resOf(err)
	})
	if rs[0].ok() || rs[1].ok() {
		hd.p = &phys{size: size}
		hd.live = true
		r.m.handles = append(r.m.handles, hd)
	}
	return true
}

func (r *runner) opRelease() bool {
	hs := r.m.liveHandles()
	if len(hs) == 0 {
		return false
	}
	r.release(pick(r, hs))
	return true
}

func (r *runner) release(h *handle) {
	r.call(fmt.Sprintf("cuMemRelease(h%d)", h.id), false, func(i int, s *side) res {
		return resOf(s.D.MemRelease(h.h[i]))
	})
	if !r.stopped {
		h.live = false
	}
}

func (r *runner) opReserve() bool {
	k := uint64(1 + r.rng.IntN(8))
	size := k * r.gran
	align := pick(r, []uint64{0, r.gran, 2 * r.gran})
	var hint func(i int) cuda.DevicePtr
	hinted := "none"
	if r.probe(0.12) {
		switch r.rng.IntN(5) {
		case 0:
			size = r.gran / 2
		case 1:
			align = 3 * r.gran
		default:
			if len(r.m.resvs) == 0 {
				break
			}
			// A hint inside a reserved range (the driver takes another
			// range for an aligned one), computed on each side from its
			// own addresses: a multiple of the alignment, a multiple of
			// the granularity that is not one of the alignment, or not
			// even one of the granularity.
			x := pick(r, r.m.resvs)
			a := max(align, r.gran)
			switch r.rng.IntN(3) {
			case 0:
				hint = func(i int) cuda.DevicePtr { return cuda.DevicePtr(alignUp(uint64(x.ptr[i]), a)) }
				hinted = fmt.Sprintf("at res%d, aligned", x.id)
			case 1:
				align, a = 2*r.gran, 2*r.gran
				hint = func(i int) cuda.DevicePtr { return cuda.DevicePtr(alignUp(uint64(x.ptr[i]), a) + r.gran) }
				hinted = fmt.Sprintf("at res%d, a multiple of %s but not of the alignment", x.id, mib(r.gran))
			case 2:
				hint = func(i int) cuda.DevicePtr { return x.ptr[i] + cuda.DevicePtr(r.gran/2) }
				hinted = fmt.Sprintf("at res%d+%s, off the granularity", x.id, mib(r.gran/2))
			}
		}
	}
	x := &resv{id: r.m.id(), size: size}
	desc := fmt.Sprintf("cuMemAddressReserve(%s, align %s, hint %s) -> res%d", mib(size), mib(align), hinted, x.id)
	rs := r.call(desc, false, func(i int, s *side) res {
		var h cuda.DevicePtr
		if hint != nil {
			h = hint(i)
		}
		p, err := s.D.MemAddressReserve(size, align, h)
		x.ptr[i], x.ok[i] = p, err == nil
		v := []string{}
		if err == nil && p%cuda.DevicePtr(max(align, r.gran)) != 0 {
			v = append(v, "misaligned")
		}
		return resOf(err, v...)
	})
	if rs[0].ok() || rs[1].ok() {
		r.m.resvs = append(r.m.resvs, x)
	}
	return true
}

func (r *runner) opAddressFree() bool {
	if len(r.m.resvs) == 0 {
		return false
	}
	x := pick(r, r.m.resvs)
	size := x.size
	if r.probe(0.15) {
		size += r.gran
	}
	r.addressFree(x, size)
	return true
}

// addressFree frees reservation x (with size, which may be wrong: a
// probe). Mappings left in it are a probe of their own: cuMemAddressFree's
// documentation says nothing of them; the driver refuses (580.159.04),
// and nothing changes. Should both sides free the range, an unmap of the
// first such mapping right after says on each side whether it survived.
func (r *runner) addressFree(x *resv, size uint64) {
	inside := r.m.mapsOf(x)
	if len(inside) > 0 {
		r.checkpoint(true)
	}
	rs := r.call(fmt.Sprintf("cuMemAddressFree(res%d, %s) [%d mappings left]", x.id, mib(size), len(inside)), false, func(i int, s *side) res {
		return resOf(s.D.MemAddressFree(x.ptr[i], size))
	})
	if !both(rs) {
		return
	}
	if len(inside) > 0 {
		o := inside[0]
		r.call(fmt.Sprintf("cuMemUnmap(map%d, %s) [after its range was freed]", o.id, mib(o.size)), false, func(i int, s *side) res {
			return resOf(s.D.MemUnmap(o.ptr(i), o.size))
		})
		if r.stopped {
			return
		}
		for _, o := range inside {
			r.m.maps = removeItem(r.m.maps, o)
		}
	}
	r.m.resvs = removeItem(r.m.resvs, x)
}

// opMap maps a whole allocation (offset 0, its size) into a hole of a
// reservation: the only mapping the driver makes (it refuses an offset or
// a part with CUDA_ERROR_NOT_SUPPORTED) and the only one the project
// asks for. Probes: a misaligned address, an offset, a part, more than
// the allocation, a range over a mapping.
func (r *runner) opMap() bool {
	hs := r.m.liveHandles()
	if len(hs) == 0 {
		return false
	}
	hd := pick(r, hs)
	size := hd.p.size
	type cand struct {
		x    *resv
		hole [2]uint64
	}
	var cands []cand
	for _, x := range r.m.resvs {
		for _, h := range r.m.holes(x, r.gran) {
			if h[1] >= size {
				cands = append(cands, cand{x, h})
			}
		}
	}
	if len(cands) == 0 {
		return false
	}
	c := pick(r, cands)
	off := c.hole[0] + uint64(r.rng.IntN(int((c.hole[1]-size)/r.gran)+1))*r.gran
	aoff := uint64(0)
	probe := ""
	if r.probe(0.15) {
		switch r.rng.IntN(6) {
		case 0:
			off += r.gran / 2
			probe = "a misaligned address"
		case 1:
			aoff = r.gran / 2
			probe = "an offset off the granularity"
		case 2:
			aoff = r.gran
			if size > r.gran {
				size -= r.gran
			}
			probe = "an offset into the allocation"
		case 3:
			aoff = size
			probe = "an offset at the allocation's end"
		case 4:
			if size > r.gran {
				size = r.gran * uint64(1+r.rng.IntN(int(size/r.gran)-1))
				probe = "a part of the allocation"
			} else {
				size += r.gran
				probe = "more than the allocation"
			}
		case 5:
			if ms := r.m.mapsOf(c.x); len(ms) > 0 {
				off = pick(r, ms).off
				probe = "over a mapping"
			} else {
				off += r.gran / 2
				probe = "a misaligned address"
			}
		}
	}
	m := &mapn{id: r.m.id(), r: c.x, off: off, size: size, hd: hd, p: hd.p, aoff: aoff}
	desc := fmt.Sprintf("cuMemMap(res%d+%s, %s, offset %s, h%d of %s) -> map%d", c.x.id, mib(off), mib(size), mib(aoff), hd.id, mib(hd.p.size), m.id)
	if probe != "" {
		desc += " [probe: " + probe + "]"
	}
	rs := r.call(desc, false, func(i int, s *side) res {
		err := s.D.MemMap(c.x.ptr[i]+cuda.DevicePtr(off), size, aoff, hd.h[i])
		m.ok[i] = err == nil
		return resOf(err)
	})
	if rs[0].ok() || rs[1].ok() {
		// A probe that a side took is mapped as drawn there: the model
		// keeps it (if one side only, the sequence stopped and the
		// cleanup unmaps it where it exists).
		r.m.maps = append(r.m.maps, m)
	}
	return true
}

// adjacent returns m and the mappings that follow it without a gap in its
// reservation, up to k of them.
func (r *runner) adjacent(m *mapn, k int) []*mapn {
	out := []*mapn{m}
	ms := r.m.mapsOf(m.r)
	i := slices.Index(ms, m)
	for j := i + 1; j < len(ms) && len(out) < k; j++ {
		if ms[j].off != out[len(out)-1].off+out[len(out)-1].size {
			break
		}
		out = append(out, ms[j])
	}
	return out
}

func span2(ms []*mapn) uint64 {
	return ms[len(ms)-1].off + ms[len(ms)-1].size - ms[0].off
}

func (r *runner) opUnmap() bool {
	if len(r.m.maps) == 0 {
		return false
	}
	m := pick(r, r.m.maps)
	if r.probe(0.15) && m.size > r.gran {
		r.checkpoint(true)
		r.call(fmt.Sprintf("cuMemUnmap(map%d, %s) [part of the mapping]", m.id, mib(r.gran)), false, func(i int, s *side) res {
			return resOf(s.D.MemUnmap(m.ptr(i), r.gran))
		})
		return true
	}
	ms := []*mapn{m}
	if r.chance(0.2) {
		ms = r.adjacent(m, 3)
	}
	r.checkpoint(true)
	r.call(fmt.Sprintf("cuMemUnmap(map%d, %s) [%d mappings]", m.id, mib(span2(ms)), len(ms)), false, func(i int, s *side) res {
		return resOf(s.D.MemUnmap(m.ptr(i), span2(ms)))
	})
	if !r.stopped {
		for _, x := range ms {
			r.m.maps = removeItem(r.m.maps, x)
		}
	}
	return true
}

// unmapOne unmaps one mapping (the teardown's).
func (r *runner) unmapOne(m *mapn) {
	r.call(fmt.Sprintf("cuMemUnmap(map%d, %s)", m.id, mib(m.size)), false, func(i int, s *side) res {
		return resOf(s.D.MemUnmap(m.ptr(i), m.size))
	})
	if !r.stopped {
		r.m.maps = removeItem(r.m.maps, m)
	}
}

func (r *runner) opSetAccess() bool {
	if len(r.m.maps) == 0 {
		return false
	}
	m := pick(r, r.m.maps)
	ms := []*mapn{m}
	if r.chance(0.2) {
		ms = r.adjacent(m, 3)
	}
	flags := cuda.AccessReadWrite
	switch k := r.rng.IntN(10); {
	case k == 0:
		flags = cuda.AccessNone
	case k == 1:
		flags = cuda.AccessRead
	}
	loc := cuda.MemLocation{Type: cuda.LocationDevice}
	size := span2(ms)
	var at func(i int) cuda.DevicePtr = func(i int) cuda.DevicePtr { return m.ptr(i) }
	valid := true
	if r.probe(0.1) {
		valid = false
		switch r.rng.IntN(3) {
		case 0:
			loc.ID = int32(r.devs)
		case 1:
			loc.Type = cuda.LocationHost
		case 2:
			hs := r.m.holes(m.r, r.gran)
			if len(hs) == 0 {
				return true
			}
			h := pick(r, hs)
			at = func(i int) cuda.DevicePtr { return m.r.ptr[i] + cuda.DevicePtr(h[0]) }
			size = h[1]
		}
	}
	// Work in flight may use the mapping: changing its access under it
	// is a race.
	r.checkpoint(r.m.tail != nil)
	desc := fmt.Sprintf("cuMemSetAccess(map%d, %s [%d mappings], {type %d, id %d}: %v)", m.id, mib(size), len(ms), loc.Type, loc.ID, flags)
	if !valid {
		desc += " [probe]"
	}
	rs := r.call(desc, false, func(i int, s *side) res {
		l := loc
		if l.Type == cuda.LocationDevice && l.ID == 0 {
			l.ID = int32(s.Dev)
		}
		return resOf(s.D.MemSetAccess(at(i), size, []cuda.AccessDesc{{Location: l, Flags: flags}}))
	})
	if both(rs) && valid {
		for _, x := range ms {
			x.access = flags
		}
	}
	return true
}

func (r *runner) opGetAccess() bool {
	gs := r.m.maps
	if len(gs) == 0 {
		return false
	}
	m := pick(r, gs)
	off := uint64(r.rng.IntN(int(m.size)))
	at := func(i int) cuda.DevicePtr { return m.ptr(i) + cuda.DevicePtr(off) }
	what := fmt.Sprintf("map%d+%#x", m.id, off)
	if r.probe(0.15) {
		if len(r.m.allocs) > 0 && r.chance(0.5) {
			a := pick(r, r.m.allocs)
			at = func(i int) cuda.DevicePtr { return a.ptr[i] }
			what = fmt.Sprintf("alloc%d", a.id)
		} else if hs := r.m.holes(m.r, r.gran); len(hs) > 0 {
			h := pick(r, hs)
			at = func(i int) cuda.DevicePtr { return m.r.ptr[i] + cuda.DevicePtr(h[0]) }
			what = fmt.Sprintf("res%d+%s (unmapped)", m.r.id, mib(h[0]))
		}
	}
	r.query(fmt.Sprintf("cuMemGetAccess(device 0, %s)", what), false, func(i int, s *side) res {
		f, err := s.D.MemGetAccess(cuda.DeviceLocation(s.Dev), at(i))
		return resOf(err, f.String())
	})
	return true
}

func (r *runner) opRetain() bool {
	if len(r.m.maps) == 0 {
		return false
	}
	m := pick(r, r.m.maps)
	off := uint64(r.rng.IntN(int(m.size)))
	var got [2]cuda.MemHandle
	rs := r.call(fmt.Sprintf("cuMemRetainAllocationHandle(map%d+%#x)", m.id, off), false, func(i int, s *side) res {
		h, err := s.D.MemRetainAllocationHandle(m.ptr(i) + cuda.DevicePtr(off))
		got[i] = h
		v := "the mapped handle"
		if h != m.hd.h[i] {
			v = "another handle"
		}
		return resOf(err, v)
	})
	for i := range 2 {
		if rs[i].ok() && !both(rs) {
			// The sequence stopped; drop the reference where taken.
			_ = r.sides[i].D.MemRelease(got[i])
		}
	}
	if both(rs) {
		r.call(fmt.Sprintf("cuMemRelease(retained h%d)", m.hd.id), false, func(i int, s *side) res {
			return resOf(s.D.MemRelease(got[i]))
		})
	}
	return true
}

func (r *runner) opProps() bool {
	hs := r.m.liveHandles()
	if len(hs) == 0 {
		return false
	}
	h := pick(r, hs)
	r.query(fmt.Sprintf("cuMemGetAllocationPropertiesFromHandle(h%d)", h.id), false, func(i int, s *side) res {
		p, err := s.D.MemGetAllocationPropertiesFromHandle(h.h[i])
		return resOf(err, fmt.Sprintf("type=%d handles=%v location={%d %d} compression=%d", p.Type, p.RequestedHandleTypes,
			p.Location.Type, p.Location.ID-int32(s.Dev), p.Flags.CompressionType))
	})
	return true
}

func (r *runner) opGranularity() bool {
	opt := pick(r, []cuda.GranularityFlags{cuda.GranularityMinimum, cuda.GranularityRecommended})
	// Fabric: as team/mpi/handletype's trial export asks.
	ht := pick(r, []cuda.HandleType{cuda.HandleNone, cuda.HandlePosixFD, cuda.HandlePosixFD, cuda.HandleFabric})
	dev := int32(0)
	if r.probe(0.2) {
		if r.chance(0.4) {
			opt = 5
		} else {
			// Ids that are no device: the driver answered for the
			// first past the last (580.159.04).
			dev = pick(r, []int32{int32(r.devs), int32(r.devs), int32(r.devs) + 63, -1})
		}
	}
	r.query(fmt.Sprintf("cuMemGetAllocationGranularity(device %d, %v, option %d)", dev, ht, opt), false, func(i int, s *side) res {
		p := cuda.DeviceAllocationProp(cuda.Device(dev), ht)
		if dev == 0 {
			p.Location.ID = int32(s.Dev)
		}
		g, err := s.D.MemGetAllocationGranularity(&p, opt)
		return resOf(err, fmt.Sprint(g))
	})
	return true
}

func (r *runner) opExportImport() bool {
	hs := r.m.liveHandles()
	if len(hs) == 0 {
		return false
	}
	var ex []*handle
	for _, h := range hs {
		if h.exportable {
			ex = append(ex, h)
		}
	}
	h := pick(r, hs)
	if len(ex) > 0 && !r.probe(0.15) {
		h = pick(r, ex)
	}
	made := "made with no handle types"
	switch {
	case h.imported:
		made = "imported"
	case h.exportable:
		made = "made with posix-fd"
	}
	var sh [2]cuda.ShareableHandle
	rs := r.call(fmt.Sprintf("cuMemExportToShareableHandle(h%d, posix-fd) [%s]", h.id, made), false, func(i int, s *side) res {
		x, err := s.D.MemExportToShareableHandle(h.h[i], cuda.HandlePosixFD)
		sh[i] = x
		return resOf(err)
	})
	closeFDs := func() {
		for i := range 2 {
			if rs[i].ok() && sh[i].FD >= 0 {
				_ = os.NewFile(uintptr(sh[i].FD), "export").Close()
			}
		}
	}
	defer closeFDs()
	if !both(rs) {
		return true
	}
	// An imported handle has no handle types: the driver does not
	// export it again (580.159.04).
	n := &handle{id: r.m.id(), p: h.p, imported: true}
	rs = r.call(fmt.Sprintf("cuMemImportFromShareableHandle(the FD of h%d) -> h%d", h.id, n.id), false, func(i int, s *side) res {
		x, err := s.D.MemImportFromShareableHandle(sh[i])
		n.h[i], n.ok[i] = x, err == nil
		return resOf(err)
	})
	if rs[0].ok() || rs[1].ok() {
		n.live = true
		r.m.handles = append(r.m.handles, n)
	}
	return true
}

// ---------------------------------------------------------------------------
// cuMemAlloc memory.

func (r *runner) opMemAlloc() bool {
	size := uint64(1 + r.rng.IntN(3<<20))
	if r.probe(0.1) {
		size = 0
	}
	a := &memAlloc{id: r.m.id(), size: size}
	rs := r.call(fmt.Sprintf("cuMemAlloc(%d) -> alloc%d", size, a.id), false, func(i int, s *side) res {
		p, err := s.D.MemAlloc(size)
		a.ptr[i], a.ok[i] = p, err == nil
		return resOf(err)
	})
	if rs[0].ok() || rs[1].ok() {
		a.p = &phys{size: size}
		r.m.allocs = append(r.m.allocs, a)
	}
	return true
}

func (r *runner) opManaged() bool {
	size := uint64(1 + r.rng.IntN(2<<20))
	flags := cuda.MemAttachGlobal
	if r.probe(0.1) {
		flags = 0
	}
	a := &memAlloc{id: r.m.id(), size: size, managed: true}
	rs := r.call(fmt.Sprintf("cuMemAllocManaged(%d, flags %d) -> managed%d", size, flags, a.id), false, func(i int, s *side) res {
		p, err := s.D.MemAllocManaged(size, flags)
		a.ptr[i], a.ok[i] = p, err == nil
		return resOf(err)
	})
	if rs[0].ok() || rs[1].ok() {
		a.p = &phys{size: size}
		r.m.allocs = append(r.m.allocs, a)
	}
	if !both(rs) {
		return true
	}
	st := r.pickStream()
	r.order(st)
	dst := pick(r, []cuda.Device{0, cuda.CPUDevice})
	rs = r.call(fmt.Sprintf("cuMemPrefetchAsync(managed%d, %d, device %d, stream%d)", a.id, size, dst, st.id), false, func(i int, s *side) res {
		d := dst
		if d == 0 {
			d = s.Dev
		}
		return resOf(s.D.MemPrefetchAsync(a.ptr[i], size, d, st.h[i]))
	})
	r.enqueued(st, rs)
	return true
}

func (r *runner) opMemFree() bool {
	if len(r.m.allocs) == 0 {
		return false
	}
	a := pick(r, r.m.allocs)
	if r.probe(0.15) && a.size > 256 {
		r.call(fmt.Sprintf("cuMemFree(alloc%d+256) [inside the allocation]", a.id), false, func(i int, s *side) res {
			return resOf(s.D.MemFree(a.ptr[i] + 256))
		})
		return true
	}
	r.memFree(a)
	return true
}

func (r *runner) memFree(a *memAlloc) {
	r.checkpoint(r.m.tail != nil || len(r.m.dirty) > 0)
	r.call(fmt.Sprintf("cuMemFree(alloc%d)", a.id), false, func(i int, s *side) res {
		return resOf(s.D.MemFree(a.ptr[i]))
	})
	if !r.stopped {
		r.m.allocs = removeItem(r.m.allocs, a)
	}
}

func (r *runner) opMemGetInfo() bool {
	r.query("cuMemGetInfo()", false, func(i int, s *side) res {
		_, _, err := s.D.MemGetInfo()
		return resOf(err)
	})
	return true
}

// ---------------------------------------------------------------------------
// Copies and sets.

// target draws n bytes (1 to max) of a region, at an offset aligned to
// align.
func (r *runner) target(maxN uint64, align uint64) (region, uint64, uint64, bool) {
	gs := r.m.regions()
	if len(gs) == 0 {
		return region{}, 0, 0, false
	}
	g := pick(r, gs)
	size := g.size()
	if size < align {
		return region{}, 0, 0, false
	}
	n := uint64(1 + r.rng.IntN(int(min(maxN, size))))
	n = max(n/align*align, align)
	off := uint64(r.rng.IntN(int(size-n)+1)) / align * align
	return g, off, n, true
}

// hole is an unmapped address inside a reservation, for probes.
func (r *runner) hole() (func(i int) cuda.DevicePtr, string, bool) {
	for _, x := range r.m.resvs {
		if hs := r.m.holes(x, r.gran); len(hs) > 0 {
			h := hs[0]
			return func(i int) cuda.DevicePtr { return x.ptr[i] + cuda.DevicePtr(h[0]) }, fmt.Sprintf("res%d+%s (unmapped)", x.id, mib(h[0])), true
		}
	}
	return nil, "", false
}

func randBytes(r *runner, n uint64) []byte {
	b := make([]byte, n)
	for i := 0; i < len(b); i += 8 {
		v := r.rng.Uint64()
		for j := 0; j < 8 && i+j < len(b); j++ {
			b[i+j] = byte(v >> (8 * j))
		}
	}
	return b
}

// pickStream draws a stream for async work (the legacy stream included).
func (r *runner) pickStream() *strm { return pick(r, r.m.streams) }

// asyncOrSync draws a stream for a copy, or nil for the synchronous form.
func (r *runner) asyncOrSync() *strm {
	if r.chance(0.5) {
		return nil
	}
	return r.pickStream()
}

func (r *runner) opHtoD() bool {
	g, off, n, ok := r.target(256<<10, 1)
	if !ok {
		return false
	}
	data := randBytes(r, n)
	st := r.asyncOrSync()
	at := func(i int) cuda.DevicePtr { return g.ptr(i) + cuda.DevicePtr(off) }
	what := fmt.Sprintf("%v+%#x", g, off)
	valid := true
	if r.probe(0.06) {
		if p, w, ok := r.hole(); ok {
			at, what, valid = p, w, false
		}
	}
	if st == nil {
		r.order(r.m.streams[0])
		rs := r.call(fmt.Sprintf("cuMemcpyHtoD(%s, %d)", what, n), false, func(i int, s *side) res {
			return resOf(s.D.MemcpyHtoD(at(i), unsafe.Pointer(&data[0]), n))
		})
		r.wrote(r.m.streams[0], rs, valid, span{g, off, n})
		return true
	}
	r.order(st)
	rs := r.call(fmt.Sprintf("cuMemcpyHtoDAsync(%s, %d, stream%d)", what, n, st.id), false, func(i int, s *side) res {
		return resOf(s.D.MemcpyHtoDAsync(at(i), unsafe.Pointer(&data[0]), n, st.h[i]))
	})
	r.m.keep = append(r.m.keep, data)
	r.wrote(st, rs, valid, span{g, off, n})
	return true
}

// wrote records that the call rs enqueued work on st that wrote sps
// (when valid): the model marks them defined and compares them at the
// next checkpoint, which comes now half of the time. A call that failed
// on both sides enqueued and wrote nothing.
func (r *runner) wrote(st *strm, rs [2]res, valid bool, sps ...span) {
	if r.stopped || !both(rs) {
		return
	}
	r.enqueued(st, rs)
	if !valid {
		return
	}
	for _, sp := range sps {
		sp.g.write(sp.off, sp.n)
		r.m.dirty = append(r.m.dirty, sp)
	}
	if r.chance(0.5) {
		r.checkpoint(true)
	}
}

func (r *runner) opDtoH() bool {
	g, off, n, ok := r.target(256<<10, 1)
	if !ok {
		return false
	}
	def := g.defined(off, n)
	var buf [2][]byte
	st := r.asyncOrSync()
	desc := fmt.Sprintf("cuMemcpyDtoH(%v+%#x, %d)", g, off, n)
	if st == nil {
		r.order(r.m.streams[0])
		rs := r.call(desc, false, func(i int, s *side) res {
			buf[i] = make([]byte, n)
			return resOf(s.D.MemcpyDtoH(unsafe.Pointer(&buf[i][0]), g.ptr(i)+cuda.DevicePtr(off), n))
		})
		if both(rs) {
			// It returns once done, after everything it was ordered after.
			r.m.tail, r.m.tailEvent = nil, nil
			r.compareHost("the bytes "+desc+" read", buf, def)
		}
		return true
	}
	r.order(st)
	rs := r.call(fmt.Sprintf("cuMemcpyDtoHAsync(%v+%#x, %d, stream%d)", g, off, n, st.id), false, func(i int, s *side) res {
		buf[i] = make([]byte, n)
		return resOf(s.D.MemcpyDtoHAsync(unsafe.Pointer(&buf[i][0]), g.ptr(i)+cuda.DevicePtr(off), n, st.h[i]))
	})
	if both(rs) {
		r.enqueued(st, rs)
		r.m.hostReads = append(r.m.hostReads, hostRead{desc: fmt.Sprintf("the bytes cuMemcpyDtoHAsync(%v+%#x, %d, stream%d) read", g, off, n, st.id), buf: buf, def: def})
	}
	return true
}

func (r *runner) opDtoD() bool {
	src, soff, n, ok := r.target(256<<10, 1)
	if !ok {
		return false
	}
	gs := r.m.regions()
	dst := pick(r, gs)
	if dst.size() < n {
		return false
	}
	doff := uint64(r.rng.IntN(int(dst.size()-n) + 1))
	sp, sb := src.phys()
	dp, db := dst.phys()
	if sp == dp && sb+soff < db+doff+n && db+doff < sb+soff+n {
		return false // overlapping copies are undefined
	}
	st := r.asyncOrSync()
	name, stream := "cuMemcpyDtoD", ""
	if st != nil {
		name, stream = "cuMemcpyDtoDAsync", fmt.Sprintf(", stream%d", st.id)
	} else {
		st = r.m.streams[0]
	}
	async := name == "cuMemcpyDtoDAsync"
	r.order(st)
	rs := r.call(fmt.Sprintf("%s(%v+%#x <- %v+%#x, %d%s)", name, dst, doff, src, soff, n, stream), false, func(i int, s *side) res {
		d, sr := dst.ptr(i)+cuda.DevicePtr(doff), src.ptr(i)+cuda.DevicePtr(soff)
		if async {
			return resOf(s.D.MemcpyDtoDAsync(d, sr, n, st.h[i]))
		}
		return resOf(s.D.MemcpyDtoD(d, sr, n))
	})
	if !both(rs) {
		return true
	}
	r.enqueued(st, rs)
	src.copyTo(soff, dst, doff, n)
	r.m.dirty = append(r.m.dirty, span{dst, doff, n})
	if r.chance(0.5) {
		r.checkpoint(true)
	}
	return true
}

func (r *runner) opMemset() bool {
	d32 := r.chance(0.5)
	align := uint64(1)
	if d32 {
		align = 4
	}
	g, off, n, ok := r.target(1<<20, align)
	if !ok {
		return false
	}
	v := r.rng.Uint32()
	at := func(i int) cuda.DevicePtr { return g.ptr(i) + cuda.DevicePtr(off) }
	valid := true
	if d32 && r.probe(0.1) {
		at = func(i int) cuda.DevicePtr { return g.ptr(i) + cuda.DevicePtr(off) + 1 }
		valid = false
	}
	st := r.asyncOrSync()
	sync := st == nil
	if sync {
		st = r.m.streams[0]
	}
	name := map[bool]string{false: "cuMemsetD8", true: "cuMemsetD32"}[d32]
	if !sync {
		name += "Async"
	}
	count := n
	if d32 {
		count = n / 4
	}
	shown := uint64(v)
	if !d32 {
		shown = uint64(uint8(v))
	}
	r.order(st)
	rs := r.call(fmt.Sprintf("%s(%v+%#x%s, %#x, %d, stream%d)", name, g, off, map[bool]string{true: "", false: "+1"}[valid], shown, count, st.id), false, func(i int, s *side) res {
		switch {
		case d32 && sync:
			return resOf(s.D.MemsetD32(at(i), v, count))
		case d32:
			return resOf(s.D.MemsetD32Async(at(i), v, count, st.h[i]))
		case sync:
			return resOf(s.D.MemsetD8(at(i), uint8(v), count))
		}
		return resOf(s.D.MemsetD8Async(at(i), uint8(v), count, st.h[i]))
	})
	r.wrote(st, rs, valid, span{g, off, n})
	return true
}

func (r *runner) opCtxSync() bool {
	r.checkpoint(true)
	return true
}

func (r *runner) opPointerAttr() bool {
	gs := r.m.regions()
	if len(gs) == 0 {
		return false
	}
	g := pick(r, gs)
	off := uint64(r.rng.IntN(int(g.size())))
	at := func(i int) cuda.DevicePtr { return g.ptr(i) + cuda.DevicePtr(off) }
	what := fmt.Sprintf("%v+%#x", g, off)
	if r.probe(0.1) {
		if p, w, ok := r.hole(); ok {
			at, what = p, w
		}
	}
	attr := pick(r, []cuda.PointerAttribute{cuda.PointerAttrContext, cuda.PointerAttrMemoryType, cuda.PointerAttrDeviceOrdinal,
		cuda.PointerAttrRangeStart, cuda.PointerAttrRangeSize, cuda.PointerAttrMapped})
	r.query(fmt.Sprintf("cuPointerGetAttribute(%d, %s)", attr, what), false, func(i int, s *side) res {
		v, err := s.D.PointerGetAttribute(attr, at(i))
		if err != nil {
			return resOf(err)
		}
		switch attr {
		case cuda.PointerAttrContext:
			c := "none"
			switch {
			case v == uint64(s.ctx):
				c = "current"
			case v != 0:
				c = "another"
			}
			return resOf(nil, "context="+c)
		case cuda.PointerAttrRangeStart:
			return resOf(nil, fmt.Sprintf("start=region%+d", int64(v)-int64(g.ptr(i))))
		case cuda.PointerAttrDeviceOrdinal:
			return resOf(nil, fmt.Sprintf("ordinal=%d", int64(v)-int64(s.Dev)))
		}
		return resOf(nil, fmt.Sprint(v))
	})
	return true
}

// device is ordinal dev as side s sees it: dev 0 is the side's device,
// another one (past the last, a probe) is passed as is.
func (s *side) device(dev int) cuda.Device {
	if dev == 0 {
		return s.Dev
	}
	return cuda.Device(dev)
}

func (r *runner) opDevice() bool {
	dev := 0
	if r.probe(0.2) {
		dev = r.devs
	}
	switch r.rng.IntN(5) {
	case 0:
		r.query(fmt.Sprintf("cuDeviceGet(%d)", dev), false, func(i int, s *side) res {
			_, err := s.D.DeviceGet(dev)
			return resOf(err)
		})
	case 1:
		attr := pick(r, []cuda.DeviceAttribute{cuda.AttrMaxThreadsPerBlock, cuda.AttrMultiprocessorCount, cuda.AttrUnifiedAddressing,
			cuda.AttrManagedMemory, cuda.AttrComputeCapabilityMajor, cuda.AttrComputeCapabilityMinor, cuda.AttrVirtualMemoryManagement,
			cuda.AttrHandleTypePosixFDSupported, cuda.AttrHandleTypeFabricSupported, cuda.AttrMulticastSupported,
			cuda.AttrGenericCompressionSupported})
		r.query(fmt.Sprintf("cuDeviceGetAttribute(%d, device %d)", attr, dev), false, func(i int, s *side) res {
			d := s.device(dev)
			v, err := s.D.DeviceAttribute(attr, d)
			return resOf(err, fmt.Sprint(v))
		})
	case 2:
		r.query(fmt.Sprintf("cuDeviceCanAccessPeer(%d, %d)", dev, dev), false, func(i int, s *side) res {
			d := s.device(dev)
			ok, err := s.D.DeviceCanAccessPeer(d, d)
			return resOf(err, fmt.Sprint(ok))
		})
	case 3:
		r.query(fmt.Sprintf("cuDeviceTotalMem(%d)", dev), false, func(i int, s *side) res {
			d := s.device(dev)
			v, err := s.D.DeviceTotalMem(d)
			return resOf(err, fmt.Sprint(v))
		})
	case 4:
		r.query("cuCtxGetCurrent()", false, func(i int, s *side) res {
			c, err := s.D.CtxGetCurrent()
			return resOf(err, fmt.Sprintf("current=%v", c == s.ctx))
		})
	}
	return true
}
