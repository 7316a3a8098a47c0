package sim

import (
	"encoding/binary"
	"fmt"
	"runtime"
	"slices"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/nvls-go/nvls/cuda"
)

// waitPTX holds simtest_wait alone, so that testPTX's entry list stays.
const waitPTX = ".version 8.1\n.target sm_90\n.address_size 64\n.visible .entry simtest_wait(.param .align 8 .b8 p[24]) { ret; }\n\x00"

func init() {
	// simtest_wait: params {addr, want, timeout ns}: spins until the u32
	// at addr equals want (a kernel polling a flag that another stream's
	// copy sets), failing after the timeout.
	testKernels["simtest_wait"] = func(l *Launch) error {
		addr := cuda.DevicePtr(binary.LittleEndian.Uint64(l.Params))
		want := uint32(binary.LittleEndian.Uint64(l.Params[8:]))
		deadline := l.Mem.GlobalTimer() + binary.LittleEndian.Uint64(l.Params[16:])
		for spin := 0; ; spin++ {
			v, err := l.Mem.LoadU32(addr)
			if err != nil {
				return err
			}
			if v == want {
				return nil
			}
			if l.Mem.GlobalTimer() > deadline {
				return fmt.Errorf("simtest_wait: the word at %#x is %d, not %d, at the deadline", uint64(addr), v, want)
			}
			if spin < 100 {
				runtime.Gosched()
			} else {
				time.Sleep(10 * time.Microsecond)
			}
		}
	}
}

// loadWait loads waitPTX on the current context and returns simtest_wait.
func loadWait(t testing.TB, n *Node) (cuda.Module, cuda.Function) {
	t.Helper()
	m, err := n.ModuleLoadData([]byte(waitPTX))
	require.NoError(t, err)
	f, err := n.ModuleGetFunction(m, "simtest_wait")
	require.NoError(t, err)
	return m, f
}

// syncWithin synchronizes stream s, failing the test when that takes
// longer than d: a graph that deadlocks fails instead of hanging.
func syncWithin(t testing.TB, n *Node, s cuda.Stream, d time.Duration) {
	t.Helper()
	done := make(chan error, 1)
	go func() { done <- n.StreamSynchronize(s) }()
	select {
	case err := <-done:
		require.NoError(t, err)
	case <-time.After(d):
		t.Fatalf("stream %#x did not finish within %v", uint64(s), d)
	}
}

// TestGraphForkRunsConcurrently: a graph replays the captured streams as a
// GPU does, not in capture order. Stream a forks b, then launches a
// kernel that waits for a flag which b's copies, captured after the
// kernel, set; b joins back and a copies out what b copied in. Replayed
// one op after another, the kernel would wait for copies that run after
// it. Every launch finishes with the right bytes, and so does a launch of
// a graph that captured this one's launch (a child graph).
func TestGraphForkRunsConcurrently(t *testing.T) {
	n := newNode(t, Config{})
	useDevice(t, n, 0)
	fs := loadTestPTX(t, n)
	wm, wait := loadWait(t, n)
	const size = 4096
	b := mapOn(t, n, 0, 2*mib, 0)
	flag, one, count := b.ptr, b.ptr+4, b.ptr+8
	src, mid, out := b.ptr+size, b.ptr+2*size, b.ptr+3*size
	require.NoError(t, n.WriteDevice(one, []byte{1, 0, 0, 0}))
	require.NoError(t, n.WriteDevice(count, make([]byte, 4)))
	sa, err := n.StreamCreate(cuda.StreamNonBlocking)
	require.NoError(t, err)
	sb, err := n.StreamCreate(cuda.StreamNonBlocking)
	require.NoError(t, err)
	fork, err := n.EventCreate(cuda.EventDisableTiming)
	require.NoError(t, err)
	join, err := n.EventCreate(cuda.EventDisableTiming)
	require.NoError(t, err)

	require.NoError(t, n.StreamBeginCapture(sa, cuda.CaptureModeGlobal))
	require.NoError(t, n.MemsetD32Async(flag, 0, 1, sa))
	require.NoError(t, n.MemsetD8Async(mid, 0, size, sa))
	require.NoError(t, n.EventRecord(fork, sa))
	require.NoError(t, n.StreamWaitEvent(sb, fork))
	launch(t, n, wait, sa, params(uint64(flag), 1, uint64(5*time.Second)))
	require.NoError(t, n.MemcpyDtoDAsync(mid, src, size, sb))
	require.NoError(t, n.MemcpyDtoDAsync(flag, one, 4, sb))
	require.NoError(t, n.EventRecord(join, sb))
	require.NoError(t, n.StreamWaitEvent(sa, join))
	require.NoError(t, n.MemcpyDtoDAsync(out, mid, size, sa))
	launch(t, n, fs.add, sa, params(uint64(count), 1))
	g, err := n.StreamEndCapture(sa)
	require.NoError(t, err)
	x, err := n.GraphInstantiate(g)
	require.NoError(t, err)

	const launches = 5
	for i := range launches {
		data := randBytes(t, size)
		require.NoError(t, n.WriteDevice(src, data))
		require.NoError(t, n.WriteDevice(out, make([]byte, size)))
		require.NoError(t, n.GraphLaunch(x, sa))
		syncWithin(t, n, sa, 20*time.Second)
		got, err := n.ReadDevice(out, size)
		require.NoError(t, err)
		require.Equal(t, data, got, "launch %d: the copy after the join sees the side stream's copy", i)
		v, err := n.Memory(0).LoadU32(count)
		require.NoError(t, err)
		require.Equal(t, uint32(i+1), v, "launch %d", i)
	}

	// Captured into another capture, the launch keeps its edges.
	require.NoError(t, n.StreamBeginCapture(sb, cuda.CaptureModeGlobal))
	require.NoError(t, n.GraphLaunch(x, sb))
	launch(t, n, fs.add, sb, params(uint64(count), 1))
	outer, err := n.StreamEndCapture(sb)
	require.NoError(t, err)
	ox, err := n.GraphInstantiate(outer)
	require.NoError(t, err)
	for i := range 2 {
		data := randBytes(t, size)
		require.NoError(t, n.WriteDevice(src, data))
		require.NoError(t, n.GraphLaunch(ox, sb))
		syncWithin(t, n, sb, 20*time.Second)
		got, err := n.ReadDevice(out, size)
		require.NoError(t, err)
		require.Equal(t, data, got, "outer launch %d", i)
		v, err := n.Memory(0).LoadU32(count)
		require.NoError(t, err)
		require.Equal(t, uint32(launches+2*(i+1)), v, "outer launch %d: the child's add and the outer one", i)
	}

	for _, x := range []cuda.GraphExec{x, ox} {
		require.NoError(t, n.GraphExecDestroy(x))
	}
	for _, g := range []cuda.Graph{g, outer} {
		require.NoError(t, n.GraphDestroy(g))
	}
	for _, e := range []cuda.Event{fork, join} {
		require.NoError(t, n.EventDestroy(e))
	}
	for _, s := range []cuda.Stream{sa, sb} {
		require.NoError(t, n.StreamDestroy(s))
	}
	require.NoError(t, n.ModuleUnload(wm))
	require.NoError(t, n.ModuleUnload(fs.mod))
	b.free(t, n)
}

// TestGraphOrder: a replay keeps every order the capture made: each
// stream's ops in order, a forked stream's ops after the fork, and the
// ops after a join after everything the joined streams did (a fork of a
// fork, joined through its parent, included).
func TestGraphOrder(t *testing.T) {
	resetAppend()
	n := newNode(t, Config{})
	useDevice(t, n, 0)
	fs := loadTestPTX(t, n)
	ss, evs := newStreams(t, n, 3), newEvents(t, n, 4)
	a, b, c := ss[0], ss[1], ss[2]
	edge := func(e cuda.Event, from, to cuda.Stream) { edgeOf(t, n, e, from, to) }
	work := func(s cuda.Stream, vs ...uint64) {
		for _, v := range vs {
			launch(t, n, fs.appendF, s, params(v))
		}
	}
	require.NoError(t, n.StreamBeginCapture(a, cuda.CaptureModeGlobal))
	work(a, 1)
	edge(evs[0], a, b)
	work(b, 10, 11)
	edge(evs[1], b, c)
	work(a, 2, 3)
	work(c, 20, 21, 22)
	work(b, 12)
	edge(evs[2], c, b)
	work(b, 13)
	work(a, 4)
	edge(evs[3], b, a)
	work(a, 5)
	g, err := n.StreamEndCapture(a)
	require.NoError(t, err)
	x, err := n.GraphInstantiate(g)
	require.NoError(t, err)

	// before says that u comes before v in every replay.
	before := [][2]uint64{
		{1, 2}, {2, 3}, {3, 4}, {4, 5}, // a's own
		{1, 10}, {10, 11}, {11, 12}, {12, 13}, // the fork, b's own
		{11, 20}, {20, 21}, {21, 22}, // b forks c
		{22, 13}, // c joins b
		{13, 5},  // b joins a
	}
	for i := range 50 {
		resetAppend()
		require.NoError(t, n.GraphLaunch(x, a))
		syncWithin(t, n, a, 20*time.Second)
		got := appended()
		require.ElementsMatch(t, []uint64{1, 2, 3, 4, 5, 10, 11, 12, 13, 20, 21, 22}, got, "replay %d", i)
		for _, e := range before {
			require.Less(t, slices.Index(got, e[0]), slices.Index(got, e[1]), "replay %d: %d before %d in %v", i, e[0], e[1], got)
		}
		require.Equal(t, uint64(5), got[len(got)-1], "replay %d: the op after the last join is last", i)
	}

	require.NoError(t, n.GraphExecDestroy(x))
	require.NoError(t, n.GraphDestroy(g))
	for _, e := range evs {
		require.NoError(t, n.EventDestroy(e))
	}
	for _, s := range ss {
		require.NoError(t, n.StreamDestroy(s))
	}
	require.NoError(t, n.ModuleUnload(fs.mod))
}

// TestGraphFaultIsSticky: a kernel of a forked stream that faults breaks
// the context: the work after the join is skipped, the bookkeeping (the
// event recorded after it) still runs, and the synchronization reports
// the fault.
func TestGraphFaultIsSticky(t *testing.T) {
	n := newNode(t, Config{})
	fs := loadTestPTXOn(t, n, 1)
	b := mapOn(t, n, 1, 2*mib, 1)
	denied := mapOn(t, n, 0, 2*mib) // device 1 has no access
	sa, err := n.StreamCreate(cuda.StreamNonBlocking)
	require.NoError(t, err)
	sb, err := n.StreamCreate(cuda.StreamNonBlocking)
	require.NoError(t, err)
	evs := newEvents(t, n, 3)
	fork, join, end := evs[0], evs[1], evs[2]
	require.NoError(t, n.StreamBeginCapture(sa, cuda.CaptureModeGlobal))
	require.NoError(t, n.EventRecord(fork, sa))
	require.NoError(t, n.StreamWaitEvent(sb, fork))
	launch(t, n, fs.load, sb, params(uint64(denied.ptr), 16))
	require.NoError(t, n.EventRecord(join, sb))
	require.NoError(t, n.StreamWaitEvent(sa, join))
	launch(t, n, fs.add, sa, params(uint64(b.ptr), 1))
	require.NoError(t, n.EventRecord(end, sa))
	g, err := n.StreamEndCapture(sa)
	require.NoError(t, err)
	x, err := n.GraphInstantiate(g)
	require.NoError(t, err)
	require.NoError(t, n.GraphLaunch(x, sa))
	requireCode(t, n.EventSynchronize(end), "cuEventSynchronize", cuda.ErrorIllegalAddress)
	requireCode(t, n.StreamSynchronize(sa), "cuStreamSynchronize", cuda.ErrorIllegalAddress)
	v, err := n.Memory(1).LoadU32(b.ptr)
	require.NoError(t, err)
	require.Zero(t, v, "the add after the join was skipped")
	requireCode(t, n.GraphLaunch(x, sa), "cuGraphLaunch", cuda.ErrorIllegalAddress)

	require.NoError(t, n.GraphExecDestroy(x))
	require.NoError(t, n.GraphDestroy(g))
	for _, e := range evs {
		require.NoError(t, n.EventDestroy(e))
	}
	for _, s := range []cuda.Stream{sa, sb} {
		require.NoError(t, n.StreamDestroy(s))
	}
	b.free(t, n)
	denied.free(t, n)
}
