package simdiff

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"math/rand/v2"
	"runtime"
	"slices"
	"strings"
	"time"
	"unsafe"

	"github.com/nvls-go/nvls/cuda"
)

// Side is one driver under comparison and the device its calls use.
type Side struct {
	// Name names the side in reports ("sim", "cuda").
	Name string
	D    cuda.Driver
	Dev  cuda.Device
}

// Config says what Run draws.
type Config struct {
	// Seed makes the run reproducible: sequence i of a seed is the same
	// calls whatever else runs.
	Seed uint64
	// Sequences is the number of sequences (default 200); Steps the
	// number of drawn operations per sequence (default 40; an operation
	// is one call or a few, e.g. a capture).
	Sequences int
	Steps     int
	// Only, when set, runs just these sequences of the seed (each is
	// the same calls as in the whole run).
	Only []int
	// Budget stops Run from starting a sequence once it has run this
	// long (0: no limit).
	Budget time.Duration
	// Images are the module images drawn (name -> PTX), loaded on both
	// sides; their kernels are launched when named in Launchable. Nil:
	// no module calls.
	Images map[string][]byte
	// Log, when set, gets one line per sequence.
	Log io.Writer
}

func (c Config) withDefaults() Config {
	if c.Sequences <= 0 {
		c.Sequences = 200
	}
	if c.Steps <= 0 {
		c.Steps = 40
	}
	return c
}

// Difference is one call whose result, or one range of memory whose
// contents, differ between the sides.
type Difference struct {
	// Seed and Sequence reproduce it (Config.Only); Call is the index of
	// the call in its sequence.
	Seed     uint64
	Sequence int
	Call     int
	// Op is the call with its arguments, or what was compared.
	Op string
	// Results are the two sides' results (in Summary.Names order);
	// Codes the same, short (the result's name, values left out): what
	// Classes groups by.
	Results [2]string
	Codes   [2]string
	// Before are the sequence's calls before it, each with its result.
	Before []string
	// Continued: the sequence went on past it, because the call failed
	// on both sides (so neither changed state) or was a query that
	// changes none.
	Continued bool
}

// class is what Classes groups a difference by: the entry point (or
// "memory contents") and both short results.
func (d Difference) class() string {
	name := d.Op
	if i := strings.IndexAny(name, "( "); i >= 0 {
		name = name[:i]
	}
	if d.Codes == ([2]string{}) {
		return "memory contents"
	}
	return fmt.Sprintf("%s: %s | %s", name, d.Codes[0], d.Codes[1])
}

// Class is the differences of one kind: one entry point and one pair of
// results (most often one root cause).
type Class struct {
	// Key is "entry point: result | result" (in Summary.Names order), or
	// "memory contents".
	Key string
	// Indexes are the differences' indexes in Summary.Differences.
	Indexes []int
}

// Classes groups the differences by entry point and pair of results,
// the largest class first (ties in order of first appearance).
func (s *Summary) Classes() []Class {
	var out []Class
	at := map[string]int{}
	for i, d := range s.Differences {
		k := d.class()
		j, ok := at[k]
		if !ok {
			j = len(out)
			at[k] = j
			out = append(out, Class{Key: k})
		}
		out[j].Indexes = append(out[j].Indexes, i)
	}
	slices.SortStableFunc(out, func(a, b Class) int { return len(b.Indexes) - len(a.Indexes) })
	return out
}

// Summary is what a Run found.
type Summary struct {
	Names     [2]string
	Seed      uint64
	Sequences int
	Calls     int
	// Compared is the number of bytes of memory compared.
	Compared    uint64
	Differences []Difference
	// Resets counts the primary contexts released and retained again
	// after a sequence left one broken (a sticky error) or stopped at a
	// difference.
	Resets  int
	Elapsed time.Duration
}

// detailed is how many differences of each class Report writes in full
// (with the calls before them); the others get one line each.
const detailed = 3

// Report writes the summary, the differences by class, and every
// difference: the first few of each class with the calls that led to
// it, the others in one line naming the class's first.
func (s *Summary) Report(w io.Writer) {
	fmt.Fprintf(w, "simdiff: seed %d: %d sequences, %d calls, %d bytes compared, %d differences (%s vs %s, %v, %d context resets)\n",
		s.Seed, s.Sequences, s.Calls, s.Compared, len(s.Differences), s.Names[0], s.Names[1], s.Elapsed.Round(time.Millisecond), s.Resets)
	classes := s.Classes()
	first := map[int]int{} // difference -> its class's first difference
	rank := map[int]int{}  // difference -> its place in its class
	if len(classes) > 0 {
		fmt.Fprintf(w, "differences by call and results (%s | %s), %d classes:\n", s.Names[0], s.Names[1], len(classes))
	}
	for _, c := range classes {
		d := s.Differences[c.Indexes[0]]
		fmt.Fprintf(w, "  %5d  %s (first: difference %d, seed %d sequence %d call %d)\n", len(c.Indexes), c.Key, c.Indexes[0]+1, d.Seed, d.Sequence, d.Call)
		for k, i := range c.Indexes {
			first[i], rank[i] = c.Indexes[0], k
		}
	}
	for k, d := range s.Differences {
		more := ""
		if d.Continued {
			more = " [the sequence went on]"
		}
		if rank[k] >= detailed {
			fmt.Fprintf(w, "difference %d: seed %d sequence %d call %d: %s%s [as difference %d]\n", k+1, d.Seed, d.Sequence, d.Call, d.Op, more, first[k]+1)
			continue
		}
		fmt.Fprintf(w, "\ndifference %d: seed %d sequence %d call %d: %s%s\n", k+1, d.Seed, d.Sequence, d.Call, d.Op, more)
		for i, name := range s.Names {
			fmt.Fprintf(w, "  %-5s %s\n", name+":", d.Results[i])
		}
		fmt.Fprintf(w, "  calls before it (reproduce with seed %d, only sequence %d):\n", d.Seed, d.Sequence)
		for _, c := range d.Before {
			fmt.Fprintf(w, "    %s\n", c)
		}
	}
}

// side is a Side with its primary context.
type side struct {
	Side
	ctx cuda.Context
}

// res is one side's result of a call: the driver's code (or codeOther for
// an error that is not a driver result), the error's text, and values
// compared when both sides succeed.
type res struct {
	code cuda.Result
	text string
	vals []string
}

// codeOther marks an error that is not a *cuda.Error.
const codeOther cuda.Result = -1

func resOf(err error, vals ...string) res {
	if err == nil {
		return res{code: cuda.Success, vals: vals}
	}
	var ce *cuda.Error
	if errors.As(err, &ce) {
		return res{code: ce.Code, text: err.Error()}
	}
	return res{code: codeOther, text: err.Error()}
}

func (r res) ok() bool { return r.code == cuda.Success }

func (r res) String() string {
	if r.code == cuda.Success {
		if len(r.vals) > 0 {
			return "CUDA_SUCCESS " + strings.Join(r.vals, " ")
		}
		return "CUDA_SUCCESS"
	}
	if r.code == codeOther {
		return "error: " + r.text
	}
	return r.text
}

// short is the result as the history shows it.
func (r res) short() string {
	if r.code == cuda.Success {
		if len(r.vals) > 0 {
			return "SUCCESS " + strings.Join(r.vals, " ")
		}
		return "SUCCESS"
	}
	if r.code == codeOther {
		return "error"
	}
	return r.code.String()
}

// same says whether two results agree. racy: the call's answer depends
// on timing (a query of work in flight), so CUDA_SUCCESS and
// CUDA_ERROR_NOT_READY agree.
func same(a, b res, racy bool) bool {
	if racy {
		norm := func(c cuda.Result) cuda.Result {
			if c == cuda.ErrorNotReady {
				return cuda.Success
			}
			return c
		}
		return norm(a.code) == norm(b.code)
	}
	if a.code != b.code {
		return false
	}
	if a.code != cuda.Success {
		return true
	}
	return slicesEqual(a.vals, b.vals)
}

func slicesEqual(a, b []string) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// runner runs the sequences of one Run.
type runner struct {
	cfg   Config
	sides [2]*side
	sum   *Summary
	gran  uint64
	devs  int
	// Per sequence.
	seq     int
	rng     *rand.Rand
	m       *model
	hist    []string
	stopped bool
	differs bool // a difference was found (the sequence may have gone on)
	ncalls  int
}

// Run draws cfg.Sequences sequences of driver calls and runs each on both
// sides, call by call, on the calling goroutine (locked to its thread;
// each side's primary context of its device is made current there). It
// compares every call's result and, after the calls that write device
// memory, the contents the sides hold (the bytes the sequence defined). A
// sequence stops at its first difference. The error is for a Run that
// could not start (a context that could not be retained).
func Run(cfg Config, a, b Side) (*Summary, error) {
	cfg = cfg.withDefaults()
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	r := &runner{cfg: cfg, sum: &Summary{Names: [2]string{a.Name, b.Name}, Seed: cfg.Seed}}
	for i, s := range []Side{a, b} {
		sd := &side{Side: s}
		if err := sd.open(); err != nil {
			if i == 1 {
				r.sides[0].close()
			}
			return nil, err
		}
		r.sides[i] = sd
	}
	defer func() {
		for _, s := range r.sides {
			s.close()
		}
	}()
	start := time.Now()
	if err := r.setup(); err != nil {
		return nil, err
	}
	for i := 0; i < cfg.Sequences; i++ {
		if cfg.Only != nil && !slices.Contains(cfg.Only, i) {
			continue
		}
		if cfg.Budget > 0 && time.Since(start) > cfg.Budget {
			break
		}
		r.sequence(i)
	}
	r.sum.Elapsed = time.Since(start)
	return r.sum, nil
}

func (s *side) open() error {
	c, err := s.D.PrimaryCtxRetain(s.Dev)
	if err != nil {
		return fmt.Errorf("simdiff: %s: retain the primary context of device %d: %w", s.Name, s.Dev, err)
	}
	if err := s.D.CtxSetCurrent(c); err != nil {
		_ = s.D.PrimaryCtxRelease(s.Dev)
		return fmt.Errorf("simdiff: %s: make the primary context current: %w", s.Name, err)
	}
	s.ctx = c
	return nil
}

func (s *side) close() {
	_ = s.D.CtxSetCurrent(0)
	_ = s.D.PrimaryCtxRelease(s.Dev)
}

// current makes s's context current on the thread (the two drivers keep
// their own notion of it; the simulator's is per thread too).
func (s *side) current() {
	_ = s.D.CtxSetCurrent(s.ctx)
}

// setup learns what both sides agree on: the allocation granularity and
// the number of devices (a device past the last is the invalid one).
func (r *runner) setup() error {
	var g [2]uint64
	var n [2]int
	for i, s := range r.sides {
		prop := cuda.DeviceAllocationProp(s.Dev, cuda.HandleNone)
		var err error
		if g[i], err = s.D.MemGetAllocationGranularity(&prop, cuda.GranularityMinimum); err != nil {
			return fmt.Errorf("simdiff: %s: granularity: %w", s.Name, err)
		}
		if n[i], err = s.D.DeviceCount(); err != nil {
			return fmt.Errorf("simdiff: %s: device count: %w", s.Name, err)
		}
	}
	if g[0] != g[1] || n[0] != n[1] {
		return fmt.Errorf("simdiff: the sides differ in granularity (%d, %d) or device count (%d, %d): configure the simulator like the device (SimConfig)", g[0], g[1], n[0], n[1])
	}
	r.gran, r.devs = g[0], n[0]
	return nil
}

// call runs one driver call on both sides, in order, and compares the
// results. f runs the call on side i and returns its result. The call is
// recorded in the history. A difference is recorded; where the call
// failed on both sides (with different codes), neither side changed
// state and the sequence goes on; otherwise the difference stops the
// sequence (r.stopped), after which call does nothing and returns
// failures.
func (r *runner) call(desc string, racy bool, f func(i int, s *side) res) [2]res {
	return r.run(desc, racy, false, f)
}

// query is call for a call that changes no state (an attribute, a
// property, an access right): a difference in the values it returns
// does not stop the sequence either.
func (r *runner) query(desc string, racy bool, f func(i int, s *side) res) [2]res {
	return r.run(desc, racy, true, f)
}

func (r *runner) run(desc string, racy, pure bool, f func(i int, s *side) res) [2]res {
	var out [2]res
	if r.stopped {
		out[0].code, out[1].code = codeOther, codeOther
		return out
	}
	for i, s := range r.sides {
		out[i] = f(i, s)
	}
	r.ncalls++
	r.sum.Calls++
	if !same(out[0], out[1], racy) {
		goOn := (!out[0].ok() && !out[1].ok()) || (pure && both(out))
		r.record(desc, [2]string{out[0].String(), out[1].String()}, [2]string{out[0].short(), out[1].short()}, goOn)
		if goOn {
			r.hist = append(r.hist, fmt.Sprintf("#%d %s = DIFFERENT: %s | %s", len(r.hist), desc, out[0].short(), out[1].short()))
		}
		return out
	}
	shown := out[0].short()
	if racy && (out[0].code == cuda.Success || out[0].code == cuda.ErrorNotReady) {
		shown = "SUCCESS or NOT_READY (work in flight)"
	}
	r.hist = append(r.hist, fmt.Sprintf("#%d %s = %s", len(r.hist), desc, shown))
	return out
}

// record records a difference; unless goOn, it stops the sequence.
// codes are the short results (none for memory contents).
func (r *runner) record(op string, results, codes [2]string, goOn bool) {
	r.sum.Differences = append(r.sum.Differences, Difference{
		Seed: r.cfg.Seed, Sequence: r.seq, Call: len(r.hist), Op: op,
		Results: results, Codes: codes, Before: append([]string(nil), r.hist...), Continued: goOn,
	})
	r.differs = true
	if !goOn {
		r.stopped = true
	}
}

// both reports whether both results are successes (the results agree
// whenever the sequence goes on).
func both(rs [2]res) bool { return rs[0].ok() && rs[1].ok() }

// sequence runs sequence i: its drawn operations, a final comparison of
// memory, and the teardown of everything it made.
func (r *runner) sequence(i int) {
	r.seq = i
	r.rng = rand.New(rand.NewPCG(r.cfg.Seed, uint64(i)))
	r.m = &model{}
	r.m.streams = []*strm{{id: 0, legacy: true, ok: [2]bool{true, true}}}
	r.hist = nil
	r.stopped, r.differs = false, false
	r.ncalls = 0
	for step := 0; step < r.cfg.Steps && !r.stopped; step++ {
		r.step()
	}
	if !r.stopped {
		r.checkpoint(true)
		r.compareAll()
		r.teardown()
	}
	if r.stopped {
		r.cleanup()
	}
	broken := r.stopped
	for _, s := range r.sides {
		s.current()
		if err := s.D.CtxSynchronize(); err != nil {
			broken = true
		}
	}
	if broken {
		r.reset()
	}
	// The host buffers of async copies stay reachable until every side
	// is synchronized (or reset) above.
	runtime.KeepAlive(r.m)
	r.sum.Sequences++
	if r.cfg.Log != nil {
		state := "same"
		switch {
		case r.stopped:
			state = "DIFFERENT (stopped)"
		case r.differs:
			state = "DIFFERENT"
		}
		fmt.Fprintf(r.cfg.Log, "simdiff: sequence %d: %d calls, %s\n", i, r.ncalls, state)
	}
}

// reset releases and retains both primary contexts: a sticky error goes,
// and so does whatever a stopped sequence left in them.
func (r *runner) reset() {
	r.sum.Resets++
	for _, s := range r.sides {
		_ = s.D.CtxSetCurrent(0)
		_ = s.D.PrimaryCtxRelease(s.Dev)
		if c, err := s.D.PrimaryCtxRetain(s.Dev); err == nil {
			s.ctx = c
		}
		s.current()
	}
}

// teardown frees everything the sequence holds, with compared calls, in
// the order a careful program would.
func (r *runner) teardown() {
	m := r.m
	for _, x := range append([]*modl(nil), m.modules...) {
		r.moduleUnload(x)
	}
	for _, e := range append([]*evt(nil), m.events...) {
		r.eventDestroy(e)
	}
	for _, s := range append([]*strm(nil), m.streams[1:]...) {
		r.streamDestroy(s)
	}
	for _, x := range append([]*mapn(nil), m.maps...) {
		r.unmapOne(x)
	}
	for _, x := range append([]*resv(nil), m.resvs...) {
		r.addressFree(x, x.size)
	}
	for _, h := range m.liveHandles() {
		r.release(h)
	}
	for _, a := range append([]*memAlloc(nil), m.allocs...) {
		r.memFree(a)
	}
}

// cleanup frees, on each side without comparing, what the model says it
// still holds (after a difference stopped the sequence).
func (r *runner) cleanup() {
	m := r.m
	for i, s := range r.sides {
		s.current()
		d := s.D
		_ = d.CtxSynchronize()
		for _, x := range m.modules {
			if x.ok[i] {
				_ = d.ModuleUnload(x.h[i])
			}
		}
		for _, e := range m.events {
			if e.ok[i] {
				_ = d.EventDestroy(e.h[i])
			}
		}
		for _, st := range m.streams[1:] {
			if st.ok[i] {
				_ = d.StreamDestroy(st.h[i])
			}
		}
		for _, x := range m.maps {
			if x.ok[i] {
				_ = d.MemUnmap(x.ptr(i), x.size)
			}
		}
		for _, x := range m.resvs {
			if x.ok[i] {
				_ = d.MemAddressFree(x.ptr[i], x.size)
			}
		}
		for _, h := range m.handles {
			if h.ok[i] && h.live {
				_ = d.MemRelease(h.h[i])
			}
		}
		for _, a := range m.allocs {
			if a.ok[i] {
				_ = d.MemFree(a.ptr[i])
			}
		}
	}
}

// checkpoint waits for all work (cuCtxSynchronize on both sides, unless
// nothing is in flight and sync is false) and compares what async work
// wrote and read since the last checkpoint.
func (r *runner) checkpoint(sync bool) {
	m := r.m
	if sync || m.tail != nil {
		r.call("cuCtxSynchronize()", false, func(i int, s *side) res { return resOf(s.D.CtxSynchronize()) })
		m.tail = nil
	}
	dirty := m.dirty
	m.dirty = nil
	for _, sp := range dirty {
		r.compare(sp.g, sp.off, sp.n, "after the work since the last synchronization")
	}
	reads := m.hostReads
	m.hostReads = nil
	for _, hr := range reads {
		r.compareHost(hr.desc, hr.buf, hr.def)
	}
}

// compareAll compares every region's defined bytes.
func (r *runner) compareAll() {
	for _, g := range r.m.regions() {
		r.compare(g, 0, g.size(), "at the end of the sequence")
	}
}

// maxCompare bounds one comparison's read.
const maxCompare = 8 << 20

// compare reads [off, off+n) of g on both sides and compares the defined
// bytes. Nothing may be in flight (checkpoint first).
func (r *runner) compare(g region, off, n uint64, why string) {
	if r.stopped {
		return
	}
	n = min(n, maxCompare)
	def := g.defined(off, n)
	if len(def) == 0 {
		return
	}
	lo, hi := def[0].lo, def[len(def)-1].hi
	var buf [2][]byte
	desc := fmt.Sprintf("cuMemcpyDtoH(%v+%#x, %d) [check]", g, off+lo, hi-lo)
	rs := r.call(desc, false, func(i int, s *side) res {
		buf[i] = make([]byte, hi-lo)
		return resOf(s.D.MemcpyDtoH(unsafe.Pointer(&buf[i][0]), g.ptr(i)+cuda.DevicePtr(off+lo), hi-lo))
	})
	if !both(rs) {
		return
	}
	shifted := make(ranges, len(def))
	for k, x := range def {
		shifted[k] = iv{x.lo - lo, x.hi - lo}
	}
	r.compareHost(fmt.Sprintf("contents of %v [%#x, %#x) %s", g, off+lo, off+hi, why), buf, shifted)
}

// compareHost compares two host buffers over def.
func (r *runner) compareHost(desc string, buf [2][]byte, def ranges) {
	if r.stopped {
		return
	}
	for _, x := range def {
		a, b := buf[0][x.lo:x.hi], buf[1][x.lo:x.hi]
		r.sum.Compared += x.hi - x.lo
		if bytes.Equal(a, b) {
			continue
		}
		k := 0
		for k < len(a) && a[k] == b[k] {
			k++
		}
		diffs := 0
		for j := range a {
			if a[j] != b[j] {
				diffs++
			}
		}
		show := func(p []byte) string {
			end := min(k+16, len(p))
			return fmt.Sprintf("bytes at +%#x: % x (%d of the %d defined bytes here differ)", x.lo+uint64(k), p[k:end], diffs, len(p))
		}
		r.record(desc, [2]string{show(a), show(b)}, [2]string{}, false)
		return
	}
}
