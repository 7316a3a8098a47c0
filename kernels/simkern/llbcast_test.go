package simkern

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/nvls-go/nvls/internal/kabi"
	"github.com/nvls-go/nvls/kernels"
	"github.com/nvls-go/nvls/kernels/internal/kref"
)

// llBcast is one LL broadcast launch (kabi.FlagLL) on every rank.
type llBcast struct {
	root        int
	bytes       int // count x elemBytes
	elemBytes   int
	grid, block uint32
	inPlace     bool
	skew        uint64 // added to send and recv (absolute pointers need no alignment)
	two         bool   // kabi.FlagLLTwo: in two steps
}

// llBcastParams are rank r's params for b, send and recv at the offsets
// given (absolute addresses, FlagAbsPtrs; the other ranks' send is recv).
func llBcastParams(w *workspace, r int, b llBcast, send, recv uint64) kabi.Params {
	p := w.params(r)
	p.Count, p.ElemBytes, p.Opcode, p.Root = uint64(b.bytes/b.elemBytes), uint32(b.elemBytes), kernels.OpBroadcast, uint32(b.root)
	p.Check = kabi.CheckArgs(kernels.OpBroadcast, 0, 0, b.root)
	p.Send, p.Recv = w.uc[r]+recv, w.uc[r]+recv
	if r == b.root {
		p.Send = w.uc[r] + send
	}
	p.Flags, p.LLArea, p.LLLines = kabi.FlagAbsPtrs|kabi.FlagLL, llOff, llCap
	if b.two {
		p.Flags |= kabi.FlagLLTwo
	}
	return p
}

// runLLBcast runs b on w with fresh data: the root's send, every recv and
// the guard past every recv random; then every rank's recv must hold the
// root's send, the guards and the root's send be unchanged, the status
// words ok, and every rank's epoch and block counter agree.
func runLLBcast(t *testing.T, w *workspace, rng *rand.Rand, b llBcast) {
	t.Helper()
	send := uint64(sendOff) + b.skew
	recv := send + uint64(b.bytes+guard+kabi.VecBytes)
	if b.inPlace {
		recv = send
	}
	data := kref.Bytes(rng, b.bytes)
	guards := make([][]byte, w.ranks)
	for r := range w.ranks {
		w.write(t, r, recv, kref.Bytes(rng, b.bytes))
		guards[r] = kref.Bytes(rng, guard)
		w.write(t, r, recv+uint64(b.bytes), guards[r])
	}
	w.write(t, b.root, send, data)
	errs := w.launch(t, kernels.BroadcastName, b.grid, b.block, nil, func(r int) kabi.Params {
		return llBcastParams(w, r, b, send, recv)
	})
	epoch := w.u32(t, 0, kabi.LLOffset)
	for r, err := range errs {
		require.NoError(t, err, "rank %d", r)
		require.Equal(t, "ok", w.status(t, r).String(), "rank %d", r)
		assert.True(t, bytes.Equal(data, w.read(t, r, recv, b.bytes)), "rank %d: recv is not the root's send", r)
		assert.Equal(t, guards[r], w.read(t, r, recv+uint64(b.bytes), guard), "rank %d: bytes past recv were written", r)
		assert.Equal(t, epoch, w.u32(t, r, kabi.LLOffset), "rank %d's epoch differs from rank 0's", r)
		assert.Zero(t, w.u32(t, r, kabi.LLOffset+4), "rank %d: the block counter is reset", r)
	}
	assert.True(t, bytes.Equal(data, w.read(t, b.root, send, b.bytes)), "the root's send changed")
}

// TestBroadcastLL: the LL broadcast, in one step and in two, on 2, 3, 5
// and 8 ranks in both flavors, every root, byte counts from 1 to several
// grid-stride rounds (in two steps: slices of one line or less to several
// rounds, empty last slices)
// (whole lines, a ragged last line, elements of 1, 2, 4 and 8 bytes),
// grids of 1 to 3 blocks of 32 to 512 threads, in place and not, at
// offsets that are no multiple of 16; the calls follow each other on one
// workspace, so the parities alternate and stale lines of other sizes and
// roots lie around.
func TestBroadcastLL(t *testing.T) {
	rng, seed := kref.NewRNG()
	t.Logf("seed %d", seed)
	for _, ranks := range []int{2, 3, 5, 8} {
		for _, f := range []kernels.Flavor{kernels.Unicast, kernels.Multicast} {
			w := newWorkspace(t, ranks, f)
			for i, c := range []struct {
				bytes, elem int
				grid, block uint32
			}{{1, 1, 1, 32}, {8, 4, 1, 32}, {13, 1, 2, 32}, {6, 2, 1, 64}, {4096, 8, 1, 512}, {8*3*64 + 8, 8, 3, 64}, {20000, 4, 2, 128}} {
				for _, inPlace := range []bool{false, true} {
					for _, two := range []bool{false, true} {
						b := llBcast{root: (i + ranks) % ranks, bytes: c.bytes, elemBytes: c.elem, grid: c.grid, block: c.block, inPlace: inPlace, skew: uint64(i % 5), two: two}
						t.Run(fmt.Sprintf("%d-ranks/%v/root-%d/%dB/grid-%dx%d/in-place=%v/two-steps=%v", ranks, f, b.root, b.bytes, b.grid, b.block, inPlace, two), func(t *testing.T) {
							runLLBcast(t, w, rng, b)
						})
					}
				}
			}
		}
	}
}

// TestBroadcastLLAmongLL: LL broadcasts between LL all-reduces on the same
// LL area, so that each kind lands on lines the other left: the epochs
// advance by one a call on every rank, every result is right.
func TestBroadcastLLAmongLL(t *testing.T) {
	rng, seed := kref.NewRNG()
	t.Logf("seed %d", seed)
	w := newWorkspace(t, 4, kernels.Unicast)
	for i := range 6 {
		runLLBcast(t, w, rng, llBcast{root: i % 4, bytes: 1000 + 333*i, elemBytes: 1, grid: 2, block: 256})
		require.Equal(t, uint32(2*i+1), w.u32(t, 0, kabi.LLOffset))
		require.Equal(t, uint32(2*i+2), llRun(t, w, rng, kernels.F32, kernels.Sum, 700-100*i, 1+uint32(i%3), 128))
	}
}

// TestBroadcastLLWaitsForEveryRank: a rank that is not the root starts
// 100 ms after the others. Nobody needs its data, yet nobody may finish
// without it: its one line is what tells the others that it is done with
// the call before (the LL area's parities). Then every result is right.
func TestBroadcastLLWaitsForEveryRank(t *testing.T) {
	rng, _ := kref.NewRNG()
	for i, root := range []int{0, 2, 0, 2} {
		w := newWorkspace(t, 4, kernels.Unicast)
		b := llBcast{root: root, bytes: 3000, elemBytes: 4, grid: 2, block: 64, two: i >= 2}
		send, recv := uint64(sendOff), uint64(sendOff+8192)
		data := kref.Bytes(rng, b.bytes)
		w.write(t, root, send, data)
		mk := func(r int) kabi.Params { return llBcastParams(w, r, b, send, recv) }
		late := 3 - root/2 // 3 or 2, never the root
		var early []int
		for r := range 4 {
			if r != late {
				early = append(early, r)
			}
		}
		done := make(chan []error)
		go func() { done <- w.launch(t, kernels.BroadcastName, b.grid, b.block, early, mk) }()
		time.Sleep(100 * time.Millisecond)
		select {
		case <-done:
			t.Fatalf("root %d: the others finished without rank %d", root, late)
		default:
		}
		require.NoError(t, w.launch(t, kernels.BroadcastName, b.grid, b.block, []int{late}, mk)[late])
		for r, err := range <-done {
			require.NoError(t, err, "rank %d", r)
		}
		for r := range 4 {
			assert.True(t, bytes.Equal(data, w.read(t, r, recv, b.bytes)), "root %d: rank %d", root, r)
		}
	}
}

// TestBroadcastLLMismatch: one rank names another root. Its lines carry
// another check, so the ranks that see them record a mismatch (with both
// checks), and every rank returns long before the timeout.
func TestBroadcastLLMismatch(t *testing.T) {
	w := newWorkspace(t, 3, kernels.Unicast)
	b := llBcast{root: 0, bytes: 512, elemBytes: 4, grid: 1, block: 64}
	start := time.Now()
	errs := w.launch(t, kernels.BroadcastName, b.grid, b.block, nil, func(r int) kabi.Params {
		o := b
		if r == 2 {
			o.root = 1
		}
		p := llBcastParams(w, r, o, sendOff, sendOff+4096)
		p.TimeoutNs = uint64(10 * time.Second)
		return p
	})
	assert.Less(t, time.Since(start), 5*time.Second)
	mismatches := 0
	for r, err := range errs {
		require.NoError(t, err, "rank %d", r)
		st := w.status(t, r)
		assert.True(t, st.Mismatch() || st.Aborted(), "rank %d: %v", r, st)
		assert.Equal(t, uint32(kernels.OpBroadcast), st.Opcode(), "rank %d", r)
		if st.Mismatch() {
			mismatches++
		}
	}
	assert.Positive(t, mismatches)
}

// TestBroadcastLLContract: what the LL broadcast refuses.
func TestBroadcastLLContract(t *testing.T) {
	w := newWorkspace(t, 3, kernels.Unicast)
	b := llBcast{root: 1, bytes: 800, elemBytes: 4, grid: 1, block: 512}
	for _, c := range []struct {
		what  string
		block uint32
		mod   func(p *kabi.Params)
	}{
		{"no LL area", 512, func(p *kabi.Params) { p.LLArea = 0 }},
		{"LL area too small", 512, func(p *kabi.Params) { p.LLLines = 99 }},
		{"block too large", 1024, func(p *kabi.Params) {}},
		{"sliced too", 512, func(p *kabi.Params) { p.Flags |= kabi.FlagSliced }},
		{"push too", 512, func(p *kabi.Params) { p.Flags |= kabi.FlagPush }},
		{"nil absolute recv", 512, func(p *kabi.Params) { p.Recv = 0 }},
		{"two steps past the area", 512, func(p *kabi.Params) { p.Flags |= kabi.FlagLLTwo; p.Count, p.LLLines = 31*8/4, 16 }}, // 2 slices of 16 lines and the one line
	} {
		t.Run(c.what, func(t *testing.T) {
			errs := w.launch(t, kernels.BroadcastName, 1, c.block, nil, func(r int) kabi.Params {
				p := llBcastParams(w, r, b, sendOff, sendOff+4096)
				c.mod(&p)
				return p
			})
			for r := range errs {
				assert.ErrorIs(t, errs[r], ErrContract, "rank %d", r)
			}
		})
	}
	// The base params are valid, also with a block of 64: only the changes
	// above break them.
	for r, err := range w.launch(t, kernels.BroadcastName, 1, 64, nil, func(r int) kabi.Params {
		return llBcastParams(w, r, b, sendOff, sendOff+4096)
	}) {
		require.NoError(t, err, "rank %d", r)
	}
	// Two steps reach 2 x (16 - 1) lines at 3 ranks with an area of 16.
	for r, err := range w.launch(t, kernels.BroadcastName, 1, 64, nil, func(r int) kabi.Params {
		p := llBcastParams(w, r, llBcast{root: 1, bytes: 30 * 8, elemBytes: 4, two: true}, sendOff, sendOff+4096)
		p.LLLines = 16
		return p
	}) {
		require.NoError(t, err, "rank %d", r)
	}
	// FlagAbsPtrs on the barrier broadcast, and an LL area without FlagLL.
	for _, mod := range []func(p *kabi.Params){
		func(p *kabi.Params) { p.Flags &^= kabi.FlagLL },
		func(p *kabi.Params) { p.Flags = 0; p.Send, p.Recv = sendOff, sendOff+4096 },
	} {
		errs := w.launch(t, kernels.BroadcastName, 1, 512, nil, func(r int) kabi.Params {
			p := llBcastParams(w, r, b, sendOff, sendOff+4096)
			mod(&p)
			return p
		})
		assert.ErrorIs(t, errs[0], ErrContract)
	}
}
