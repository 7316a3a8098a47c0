package simkern

import (
	"encoding/binary"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/nvls-go/nvls/internal/kabi"
	"github.com/nvls-go/nvls/kernels"
	"github.com/nvls-go/nvls/kernels/internal/kref"
)

// llRun runs one LL all-reduce of count elements on every rank (out of
// place, offsets) with grid blocks of block threads, checks the results,
// and returns the epoch every rank ended with.
func llRun(t *testing.T, w *workspace, rng *rand.Rand, dt kernels.DType, op kernels.RedOp, count int, grid, block uint32) uint32 {
	t.Helper()
	nbytes := count * dt.Size()
	send := uint64(sendOff)
	recv := send + uint64(nbytes+guard+15)/16*16
	ins := make([][]byte, w.ranks)
	for r := range w.ranks {
		ins[r] = kref.Input(rng, dt, count)
		w.write(t, r, send, ins[r])
		w.write(t, r, recv, randBytes(t, nbytes))
	}
	errs := w.launch(t, kernels.AllReduceName(dt, op, kernels.LL), grid, block, nil, func(r int) kabi.Params {
		p := w.params(r)
		p.Send, p.Recv, p.LLArea, p.Count, p.Opcode, p.LLLines = send, recv, llOff, uint64(count), kernels.OpAllReduce, llCap
		p.ElemBytes = uint32(dt.Size())
		return p
	})
	var epoch uint32
	for r := range w.ranks {
		require.NoError(t, errs[r], "rank %d", r)
		require.Equal(t, "ok", w.status(t, r).String(), "rank %d", r)
		checkAllReduce(t, dt, op, ins, w.read(t, r, recv, nbytes), count)
		e := w.u32(t, r, kabi.LLOffset)
		require.Zero(t, w.u32(t, r, kabi.LLOffset+4), "rank %d: the block counter is reset", r)
		if r == 0 {
			epoch = e
		}
		require.Equal(t, epoch, e, "rank %d's epoch differs from rank 0's", r)
	}
	return epoch
}

// TestLLEpochsAcrossSizes: consecutive LL calls of different sizes and
// grids (so that line i lands at different places of the LL area, and
// stale lines of the other parity and of earlier calls lie around): the
// epoch advances by one per call on every rank, every result is right.
func TestLLEpochsAcrossSizes(t *testing.T) {
	rng, seed := kref.NewRNG()
	t.Logf("seed %d", seed)
	w := newWorkspace(t, 3, kernels.Unicast)
	want := uint32(0)
	for i, c := range []struct {
		count       int
		grid, block uint32
	}{{1, 1, 32}, {4097, 3, 512}, {5, 1, 64}, {4097, 2, 128}, {300, 4, 32}, {1, 1, 512}, {2000, 3, 512}} {
		want++
		got := llRun(t, w, rng, kernels.F32, kernels.Sum, c.count, c.grid, c.block)
		require.Equal(t, want, got, "call %d", i)
	}
}

// TestLLEpochWrap: the epoch runs across 2^32; 0 is skipped for 2, so the
// parity keeps alternating (0xffffffff is odd, 2 even) and stale lines of
// a zeroed area (flag 0) never match.
func TestLLEpochWrap(t *testing.T) {
	assert.Equal(t, uint32(1), llEpoch(0))
	assert.Equal(t, uint32(0xffffffff), llEpoch(0xfffffffe))
	assert.Equal(t, uint32(2), llEpoch(0xffffffff))
	rng, seed := kref.NewRNG()
	t.Logf("seed %d", seed)
	for _, f := range []kernels.Flavor{kernels.Unicast, kernels.Multicast} {
		t.Run(f.String(), func(t *testing.T) {
			w := newWorkspace(t, 4, f)
			var b [4]byte
			binary.LittleEndian.PutUint32(b[:], 0xfffffffd)
			for r := range w.ranks {
				w.write(t, r, kabi.LLOffset, b[:])
			}
			for i, want := range []uint32{0xfffffffe, 0xffffffff, 2, 3, 4} {
				got := llRun(t, w, rng, kernels.BF16, kernels.Max, 1000+i*77, 2, 512)
				require.Equal(t, want, got)
			}
		})
	}
}

// TestLLLateRank: one rank starts its LL kernel 100 ms after the others;
// they wait for its lines and everyone gets the right result.
func TestLLLateRank(t *testing.T) {
	rng, _ := kref.NewRNG()
	w := newWorkspace(t, 4, kernels.Unicast)
	const count = 999
	ins := make([][]byte, w.ranks)
	for r := range w.ranks {
		ins[r] = kref.Input(rng, kernels.U64, count)
		w.write(t, r, sendOff, ins[r])
	}
	name := kernels.AllReduceName(kernels.U64, kernels.Sum, kernels.LL)
	mk := func(r int) kabi.Params {
		p := w.params(r)
		p.Send, p.Recv, p.LLArea, p.Count, p.Opcode, p.LLLines = sendOff, sendOff, llOff, count, kernels.OpAllReduce, llCap
		p.ElemBytes = 8
		return p
	}
	done := make(chan []error)
	go func() { done <- w.launch(t, name, 2, 512, []int{0, 1, 3}, mk) }()
	time.Sleep(100 * time.Millisecond)
	select {
	case <-done:
		t.Fatal("the others finished without rank 2")
	default:
	}
	require.NoError(t, w.launch(t, name, 2, 512, []int{2}, mk)[2])
	for r, err := range <-done {
		require.NoError(t, err, "rank %d", r)
	}
	for r := range w.ranks {
		checkAllReduce(t, kernels.U64, kernels.Sum, ins, w.read(t, r, sendOff, count*8), count)
	}
}

// TestLLTimeout: rank 1 never launches; the others record a timeout of
// the all-reduce (phase 0) in their status words and return (one of them
// may give up on seeing the other's failure first).
func TestLLTimeout(t *testing.T) {
	w := newWorkspace(t, 3, kernels.Multicast)
	name := kernels.AllReduceName(kernels.S32, kernels.Min, kernels.LL)
	start := time.Now()
	errs := w.launch(t, name, 2, 512, []int{0, 2}, func(r int) kabi.Params {
		p := w.params(r)
		p.Send, p.Recv, p.LLArea, p.Count, p.Opcode, p.LLLines = sendOff, sendOff+4096, llOff, 700, kernels.OpAllReduce, llCap
		p.ElemBytes = 4
		p.TimeoutNs = uint64(50 * time.Millisecond)
		return p
	})
	assert.Less(t, time.Since(start), 5*time.Second)
	for _, r := range []int{0, 2} {
		require.NoError(t, errs[r])
		st := w.status(t, r)
		assert.True(t, st.TimedOut() || st.Aborted(), "rank %d: %v", r, st)
		assert.Equal(t, uint32(kernels.OpAllReduce), st.Opcode())
		assert.Equal(t, uint32(0), st.Phase())
	}
	assert.True(t, w.status(t, 0).TimedOut() || w.status(t, 2).TimedOut(), "someone timed out")
	assert.Equal(t, "ok", w.status(t, 1).String())
}

// TestLLContract: what the LL kernel refuses.
func TestLLContract(t *testing.T) {
	w := newWorkspace(t, 2, kernels.Unicast)
	name := kernels.AllReduceName(kernels.F32, kernels.Sum, kernels.LL)
	for _, c := range []struct {
		what  string
		block uint32
		mod   func(p *kabi.Params)
	}{
		{"no LL area", 512, func(p *kabi.Params) { p.LLArea = 0 }},
		{"LL area over send", 512, func(p *kabi.Params) { p.LLArea = sendOff }},
		{"unknown flag", 512, func(p *kabi.Params) { p.Flags = 2 }},
		{"nil absolute send", 512, func(p *kabi.Params) { p.Flags, p.Send = kabi.FlagAbsPtrs, 0 }},
		{"block too large", 1024, func(p *kabi.Params) {}},
		{"LL area too small", 512, func(p *kabi.Params) { p.LLLines = 12 }},
		{"a stage for LL", 512, func(p *kabi.Params) { p.Stage = sendOff + 8192 }},
		{"a root for LL", 512, func(p *kabi.Params) { p.Root = 1 }},
		{"elem_bytes not the type's", 512, func(p *kabi.Params) { p.ElemBytes = 8 }},
	} {
		t.Run(c.what, func(t *testing.T) {
			errs := w.launch(t, name, 1, c.block, nil, func(r int) kabi.Params {
				p := w.params(r)
				p.Send, p.Recv, p.LLArea, p.Count, p.Opcode, p.LLLines = sendOff, sendOff+4096, llOff, 100, kernels.OpAllReduce, llCap
				p.ElemBytes = 4
				c.mod(&p)
				return p
			})
			for r := range errs {
				assert.ErrorIs(t, errs[r], ErrContract, "rank %d", r)
			}
		})
	}
	// The base params are valid: only the changes above break them.
	for r, err := range w.launch(t, name, 1, 512, nil, func(r int) kabi.Params {
		p := w.params(r)
		p.Send, p.Recv, p.LLArea, p.Count, p.Opcode, p.LLLines = sendOff, sendOff+4096, llOff, 100, kernels.OpAllReduce, llCap
		p.ElemBytes = 4
		return p
	}) {
		require.NoError(t, err, "rank %d", r)
	}
	// FlagAbsPtrs is the LL kernel's only.
	errs := w.launch(t, kernels.AllReduceName(kernels.F32, kernels.Sum, kernels.OneShot), 1, 512, nil, func(r int) kabi.Params {
		p := w.params(r)
		p.Send, p.Recv, p.Count, p.ElemBytes, p.Flags = sendOff, sendOff+4096, 100, 4, kabi.FlagAbsPtrs
		return p
	})
	assert.ErrorIs(t, errs[0], ErrContract)
}
