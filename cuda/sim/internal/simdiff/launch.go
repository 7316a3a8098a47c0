package simdiff

import (
	"fmt"
	"slices"
	"sort"
	"unsafe"

	"github.com/nvls-go/nvls/cuda"
	"github.com/nvls-go/nvls/cuda/sim"
	"github.com/nvls-go/nvls/internal/kabi"
	"github.com/nvls-go/nvls/kernels"
)

// Modules and launches. The images are the project's unicast PTX (the
// simulator runs its Go reference kernels under the same entry names);
// the kernels launched are the broadcast and the barrier of a team of one
// rank, on a workspace the sequence made: their results (the copy, the
// barrier counters and epochs, the status word) are the same on every
// device, and no launch waits for anything but its own device.

const (
	entryBroadcast = "nvls_broadcast"
	entryBarrier   = "nvls_barrier"
)

// imageNames are the configured images, sorted (draws are reproducible).
func (r *runner) imageNames() []string {
	var out []string
	for k := range r.cfg.Images {
		out = append(out, k)
	}
	sort.Strings(out)
	return out
}

func (r *runner) opModuleLoad() bool {
	names := r.imageNames()
	if len(names) == 0 {
		return false
	}
	name := pick(r, names)
	img := r.cfg.Images[name]
	if r.probe(0.1) {
		name, img = "not PTX", []byte("this is not a module image\n")
	}
	r.moduleLoad(name, img)
	return true
}

func (r *runner) moduleLoad(name string, img []byte) *modl {
	x := &modl{id: r.m.id(), image: name, fns: map[string][2]cuda.Function{}}
	rs := r.call(fmt.Sprintf("cuModuleLoadData(%s, %d bytes) -> module%d", name, len(img), x.id), false, func(i int, s *side) res {
		h, err := s.D.ModuleLoadData(img)
		x.h[i], x.ok[i] = h, err == nil
		return resOf(err)
	})
	if rs[0].ok() || rs[1].ok() {
		r.m.modules = append(r.m.modules, x)
	}
	if both(rs) {
		return x
	}
	return nil
}

func (r *runner) opGetFunction() bool {
	var ms []*modl
	for _, x := range r.m.modules {
		if _, ok := r.cfg.Images[x.image]; ok {
			ms = append(ms, x)
		}
	}
	if len(ms) == 0 {
		return false
	}
	x := pick(r, ms)
	names := sim.PTXEntries(r.cfg.Images[x.image])
	name := "nvls_no_such_kernel"
	if len(names) > 0 && !r.probe(0.15) {
		name = pick(r, names)
	}
	r.getFunction(x, name)
	return true
}

func (r *runner) getFunction(x *modl, name string) ([2]cuda.Function, bool) {
	var f [2]cuda.Function
	rs := r.call(fmt.Sprintf("cuModuleGetFunction(module%d, %q)", x.id, name), false, func(i int, s *side) res {
		fn, err := s.D.ModuleGetFunction(x.h[i], name)
		f[i] = fn
		return resOf(err)
	})
	if both(rs) {
		x.fns[name] = f
		return f, true
	}
	return f, false
}

func (r *runner) opModuleUnload() bool {
	if len(r.m.modules) == 0 {
		return false
	}
	r.moduleUnload(pick(r, r.m.modules))
	return true
}

func (r *runner) moduleUnload(x *modl) {
	// No kernel of the module may be in flight.
	r.checkpoint(r.m.tail != nil)
	r.call(fmt.Sprintf("cuModuleUnload(module%d)", x.id), false, func(i int, s *side) res {
		return resOf(s.D.ModuleUnload(x.h[i]))
	})
	if !r.stopped {
		r.m.modules = removeItem(r.m.modules, x)
	}
}

// function returns a function named entry of a loaded module, loading the
// module and looking the function up (drawn calls) where needed.
func (r *runner) function(entry string) ([2]cuda.Function, bool) {
	var img string
	for _, name := range r.imageNames() {
		if slices.Contains(sim.PTXEntries(r.cfg.Images[name]), entry) {
			img = name
		}
	}
	if img == "" {
		return [2]cuda.Function{}, false
	}
	var x *modl
	for _, m := range r.m.modules {
		if m.image == img {
			x = m
		}
	}
	if x == nil {
		if x = r.moduleLoad(img, r.cfg.Images[img]); x == nil {
			return [2]cuda.Function{}, false
		}
	}
	if f, ok := x.fns[entry]; ok {
		return f, true
	}
	return r.getFunction(x, entry)
}

// launchPlan is one launch of a kernel on a workspace region.
type launchPlan struct {
	r     *runner
	entry string
	f     [2]cuda.Function
	g     region
	p     kabi.Params // UC[0] is set per side
	grid  cuda.Dim3
	block cuda.Dim3
	// valid: the shape is one the kernel takes (a probe is not).
	valid bool
	// effect is what the launch does to the model; spans what it writes.
	effect func()
	spans  []span
}

func (lp *launchPlan) desc(st *strm) string {
	p := lp.p
	s := fmt.Sprintf("cuLaunchKernel(%s, grid %d, block %d, stream%d, {%v, count %d, elem %d, send %#x, recv %#x})",
		lp.entry, lp.grid.X, lp.block.X, st.id, lp.g, p.Count, p.ElemBytes, p.Send, p.Recv)
	if !lp.valid {
		s += " [probe]"
	}
	return s
}

func (lp *launchPlan) launch(i int, s *side, st *strm) res {
	p := lp.p
	p.UC[0] = uint64(lp.g.ptr(i))
	return resOf(s.D.LaunchKernel(lp.f[i], lp.grid, lp.block, 0, st.h[i], unsafe.Pointer(&p), kabi.ParamsSize))
}

// planLaunch draws a launch of the broadcast or the barrier kernel on a
// region large enough for a workspace, and zeroes the region's signal
// area first (a synchronous memset: the barrier counters and epochs start
// from the same values on both sides). nil when nothing fits.
func (r *runner) planLaunch() *launchPlan {
	var ws []region
	for _, g := range r.m.regions() {
		if g.size() >= kabi.SignalBytes+4096 {
			ws = append(ws, g)
		}
	}
	if len(ws) == 0 {
		return nil
	}
	entry := entryBroadcast
	if r.chance(0.3) {
		entry = entryBarrier
	}
	f, ok := r.function(entry)
	if !ok || r.stopped {
		return nil
	}
	g := pick(r, ws)
	lp := &launchPlan{r: r, entry: entry, f: f, g: g, valid: true}
	lp.p = kabi.Params{Rank: 0, NRanks: 1, TimeoutNs: 5e9}
	sig := span{g, 0, kabi.SignalBytes}
	if entry == entryBarrier {
		lp.p.Opcode = kernels.OpBarrier
		lp.grid, lp.block = cuda.D1(1), cuda.D1(uint32(32*(1+r.rng.IntN(16))))
		lp.spans = []span{sig}
		lp.effect = func() { g.write(0, kabi.SignalBytes) }
	} else {
		elem := uint64(pick(r, []int{1, 2, 4, 8}))
		room := (g.size() - kabi.SignalBytes) / 2
		maxBytes := min(room-64, 256<<10)
		count := uint64(1 + r.rng.IntN(int(maxBytes/elem)))
		n := count * elem
		send := uint64(kabi.SignalBytes) + 16*uint64(r.rng.IntN(4))
		recv := (send+n+15)/16*16 + 16*uint64(r.rng.IntN(2))
		lp.p.Opcode = kernels.OpBroadcast
		lp.p.Count, lp.p.ElemBytes, lp.p.Send, lp.p.Recv = count, uint32(elem), send, recv
		lp.grid, lp.block = cuda.D1(uint32(1+r.rng.IntN(8))), cuda.D1(kabi.BlockThreads)
		lp.spans = []span{sig, {g, recv, n}}
		lp.effect = func() {
			g.write(0, kabi.SignalBytes)
			g.copyTo(send, g, recv, n)
		}
		if r.chance(0.5) {
			data := randBytes(r, n)
			r.order(r.m.streams[0])
			rs := r.call(fmt.Sprintf("cuMemcpyHtoD(%v+%#x, %d) [the broadcast's input]", g, send, n), false, func(i int, s *side) res {
				return resOf(s.D.MemcpyHtoD(g.ptr(i)+cuda.DevicePtr(send), unsafe.Pointer(&data[0]), n))
			})
			r.wrote(r.m.streams[0], rs, true, span{g, send, n})
		}
	}
	r.order(r.m.streams[0])
	rs := r.call(fmt.Sprintf("cuMemsetD8(%v, 0, %d) [the signal area]", g, kabi.SignalBytes), false, func(i int, s *side) res {
		return resOf(s.D.MemsetD8(g.ptr(i), 0, kabi.SignalBytes))
	})
	r.wrote(r.m.streams[0], rs, true, sig)
	if !both(rs) {
		return nil
	}
	return lp
}

func (r *runner) opLaunch() bool {
	if len(r.cfg.Images) == 0 {
		return false
	}
	lp := r.planLaunch()
	if lp == nil {
		return !r.stopped && len(r.m.regions()) > 0
	}
	if r.probe(0.08) {
		lp.valid = false
		if r.chance(0.5) {
			lp.block = cuda.D1(1025)
		} else {
			lp.grid = cuda.Dim3{X: 0, Y: 1, Z: 1}
		}
	}
	st := r.pickStream()
	r.order(st)
	rs := r.call(lp.desc(st), false, func(i int, s *side) res { return lp.launch(i, s, st) })
	if !both(rs) || !lp.valid {
		return true
	}
	r.enqueued(st, rs)
	lp.effect()
	r.m.dirty = append(r.m.dirty, lp.spans...)
	if r.chance(0.5) {
		r.checkpoint(true)
	}
	return true
}
