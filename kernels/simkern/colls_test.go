package simkern

import (
	"bytes"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/nvls-go/nvls/internal/kabi"
	"github.com/nvls-go/nvls/kernels"
	"github.com/nvls-go/nvls/kernels/internal/kref"
)

// collCase is one launch of a reduce-scatter, all-gather or reduce.
type collCase struct {
	k       kernels.Kernel
	count   int // elements per slice (reduce-scatter, all-gather) or in all (reduce)
	grid    uint32
	inPlace bool
	abs     bool // the own-only operand as an address, shifted by an element
	root    int
	flags   uint32 // added to the launch's (kabi.FlagRootSlice)
	stage   uint64 // params.stage (the push reduce's FIFO), 0 for none
}

// runColl runs c on w with fresh inputs and checks every rank's output,
// the guard past it, and the status words.
func runColl(t *testing.T, w *workspace, rng *rand.Rand, c collCase) {
	dt := c.k.DType
	e := dt.Size()
	n := w.ranks
	in, out := c.count*e, c.count*e // bytes of every rank's input and output
	switch c.k.Coll {
	case kernels.CollReduceScatter:
		in = n * c.count * e
	case kernels.CollAllGather:
		out = n * c.count * e
	}
	send := uint64(sendOff)
	recv := send + uint64((max(in, out)+guard+2*kabi.VecBytes)/kabi.VecBytes*kabi.VecBytes)
	// In place, the own-only operand of reduce-scatter and all-gather is
	// inside the other one: an address (as collectives passes it).
	c.abs = c.abs || (c.inPlace && c.k.Coll != kernels.CollReduce)
	sendAt, recvAt := send, recv // where the data is, as offsets
	switch {
	case c.inPlace && c.k.Coll != kernels.CollReduce:
		// per rank below
	case c.inPlace:
		recvAt = send
	case c.abs && c.k.Coll == kernels.CollAllGather:
		sendAt += uint64(e)
	case c.abs:
		recvAt += uint64(e)
	}
	ins, guards := make([][]byte, n), make([][]byte, n)
	for r := range n {
		s, o := sendAt, recvAt
		if c.inPlace && c.k.Coll == kernels.CollReduceScatter {
			o = send + uint64(r*c.count*e)
		}
		if c.inPlace && c.k.Coll == kernels.CollAllGather {
			s = recv + uint64(r*c.count*e)
		}
		ins[r] = kref.Input(rng, dt, in/e)
		if !c.inPlace {
			w.write(t, r, o, kref.Bytes(rng, out))
		}
		w.write(t, r, s, ins[r])
		if c.k.Coll != kernels.CollReduceScatter || !c.inPlace { // else inside send
			guards[r] = kref.Bytes(rng, guard)
			w.write(t, r, o+uint64(out), guards[r])
		}
	}
	errs := w.launch(t, c.k.Name(), c.grid, kabi.BlockThreads, nil, func(r int) kabi.Params {
		p := w.params(r)
		p.Count, p.ElemBytes, p.Opcode = uint64(c.count), uint32(e), c.k.Coll.Opcode()
		p.Send, p.Recv = sendAt, recvAt
		if c.inPlace && c.k.Coll == kernels.CollReduceScatter {
			p.Recv = send + uint64(r*c.count*e)
		}
		if c.inPlace && c.k.Coll == kernels.CollAllGather {
			p.Send = recv + uint64(r*c.count*e)
		}
		if c.k.Coll == kernels.CollReduce {
			p.Root = uint32(c.root)
		}
		p.Flags |= c.flags
		p.Stage = c.stage
		switch {
		case c.k.Algo == kernels.LL:
			p.Send, p.Recv, p.Flags = w.uc[r]+p.Send, w.uc[r]+p.Recv, kabi.FlagAbsPtrs|c.flags
			p.LLArea, p.LLLines = llOff, llCap
		case c.abs && c.k.Coll == kernels.CollAllGather:
			p.Send, p.Flags = w.uc[r]+p.Send, kabi.FlagAbsSend
		case c.abs && c.k.Algo == kernels.OneShot:
			p.Recv, p.Flags = w.uc[r]+p.Recv, kabi.FlagAbsRecv
		}
		return p
	})
	for r, err := range errs {
		require.NoError(t, err, "rank %d", r)
		assert.Equal(t, "ok", w.status(t, r).String())
	}
	checkColl(t, w, c, ins, recvAt, out, guards)
}

// checkColl compares every rank's output at recvAt (out bytes; reduce-
// scatter in place: the rank's slice of send) with the reference.
func checkColl(t *testing.T, w *workspace, c collCase, ins [][]byte, recvAt uint64, out int, guards [][]byte) {
	dt, e := c.k.DType, c.k.DType.Size()
	for r := range w.ranks {
		if c.k.Coll == kernels.CollReduce && r != c.root {
			continue
		}
		o := recvAt
		if c.inPlace && c.k.Coll == kernels.CollReduceScatter {
			o = sendOff + uint64(r*c.count*e)
		}
		got := w.read(t, r, o, out)
		switch c.k.Coll {
		case kernels.CollAllGather:
			assert.True(t, bytes.Equal(bytes.Join(ins, nil), got), "rank %d: the gathered slots differ from the sends", r)
		case kernels.CollReduceScatter:
			slices := make([][]byte, w.ranks)
			for q := range slices {
				slices[q] = ins[q][r*out : (r+1)*out]
			}
			checkAllReduce(t, dt, c.k.Op, slices, got, c.count)
		default:
			checkAllReduce(t, dt, c.k.Op, ins, got, c.count)
		}
		if guards[r] != nil {
			assert.Equal(t, guards[r], w.read(t, r, o+uint64(out), guard), "rank %d: bytes past the output were written", r)
		}
	}
}

// TestCollsMatrix: reduce-scatter, all-gather and reduce, every algorithm,
// on 2, 3, 5 and 8 ranks in both flavors, one type and operator per
// family and rank count (collectives' tests run every pair), counts of 1
// element, a tail, one vector, ragged slices (not a whole vector per
// rank) and several blocks with a grid-stride wrap, in place and not,
// the own-only operand as an address at an element's offset.
func TestCollsMatrix(t *testing.T) {
	rng, seed := kref.NewRNG()
	t.Logf("seed %d", seed)
	pairs := [][2]any{{kernels.BF16, kernels.Sum}, {kernels.U64, kernels.Max}, {kernels.F32, kernels.Sum}, {kernels.S32, kernels.Min}}
	for i, ranks := range []int{2, 3, 5, 8} {
		for _, f := range []kernels.Flavor{kernels.Unicast, kernels.Multicast} {
			w := newWorkspace(t, ranks, f)
			dt, op := pairs[i][0].(kernels.DType), pairs[i][1].(kernels.RedOp)
			per := kabi.VecBytes / dt.Size()
			counts := []int{1, 2*per + 1, per, 3*per + per/2 + 1, (2*kabi.BlockThreads + 37) * per / ranks}
			for _, k := range []kernels.Kernel{
				{Coll: kernels.CollReduceScatter, Algo: kernels.OneShot}, {Coll: kernels.CollReduceScatter, Algo: kernels.LL},
				{Coll: kernels.CollAllGather, Algo: kernels.OneShot}, {Coll: kernels.CollAllGather, Algo: kernels.LL},
				{Coll: kernels.CollReduce, Algo: kernels.OneShot}, {Coll: kernels.CollReduce, Algo: kernels.TwoShot}, {Coll: kernels.CollReduce, Algo: kernels.LL},
			} {
				k.DType, k.Op = dt, op
				for j, count := range counts {
					for _, inPlace := range []bool{false, true} {
						abs := !inPlace && j%2 == 1 && k.Algo != kernels.TwoShot
						c := collCase{k: k, count: count, grid: uint32(1 + j%3), inPlace: inPlace, abs: abs, root: j % ranks}
						t.Run(fmt.Sprintf("%d-ranks/%v/%s/%d/in-place=%v/abs=%v", ranks, f, k.Name(), count, inPlace, c.abs), func(t *testing.T) {
							runColl(t, w, rng, c)
						})
						if k.Coll == kernels.CollReduce && k.Algo == kernels.TwoShot {
							c.flags = kabi.FlagRootSlice // the root reduces a slice too
							t.Run(fmt.Sprintf("%d-ranks/%v/%s/%d/in-place=%v/root-slice", ranks, f, k.Name(), count, inPlace), func(t *testing.T) {
								runColl(t, w, rng, c)
							})
						}
						if k.Coll == kernels.CollReduce && k.Algo == kernels.LL {
							c.flags, c.abs = kabi.FlagLLTwo, false // in two steps
							t.Run(fmt.Sprintf("%d-ranks/%v/%s/%d/in-place=%v/two-steps", ranks, f, k.Name(), count, inPlace), func(t *testing.T) {
								runColl(t, w, rng, c)
							})
						}
					}
				}
			}
		}
	}
}
