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

const (
	sendOff = kabi.SignalBytes
	guard   = 64
	// llOff is the LL area's offset in the tests' 2 MiB workspaces, and
	// llCap its capacity in lines per parity and source (params.ll_lines):
	// 1 MiB for 8 ranks.
	llOff = 1 << 20
	llCap = 4096
)

// runAllReduce runs one all-reduce on w with fresh random inputs
// (kref.Input) and checks the result against kref.CheckAllReduce
// (runAllReduceOn checks the rest).
func runAllReduce(t *testing.T, w *workspace, rng *rand.Rand, algo kernels.Algo, dt kernels.DType, op kernels.RedOp, sc kref.SizeCase) {
	count := sc.Count(kabi.VecBytes/dt.Size(), w.ranks)
	ins := make([][]byte, w.ranks)
	for r := range ins {
		ins[r] = kref.Input(rng, dt, count)
	}
	checkAllReduce(t, dt, op, ins, runAllReduceOn(t, w, algo, dt, op, sc, ins), count)
}

// runAllReduceOn runs one all-reduce of ins (one input per rank, of
// sc.Count elements) on w, checks that the ranks agree bit for bit, that
// nothing past the output was written and that the status words stay 0,
// and returns rank 0's result.
func runAllReduceOn(t *testing.T, w *workspace, algo kernels.Algo, dt kernels.DType, op kernels.RedOp, sc kref.SizeCase, ins [][]byte) []byte {
	t.Helper()
	per := kabi.VecBytes / dt.Size()
	count := sc.Count(per, w.ranks)
	nbytes := count * dt.Size()
	span := uint64((nbytes + guard + kabi.VecBytes - 1) / kabi.VecBytes * kabi.VecBytes)
	send := uint64(sendOff)
	recv := send + span
	var stage uint64
	if sc.InPlace {
		recv = send
		if algo == kernels.OneShot {
			stage = send + span
		}
	}
	var flags uint32
	if algo == kernels.LL {
		// Absolute pointers for odd counts, offsets for even ones.
		flags = uint32(count&1) * kabi.FlagAbsPtrs
	}
	guards := make([][]byte, w.ranks)
	for r := range w.ranks {
		w.write(t, r, send, ins[r])
		if !sc.InPlace {
			w.write(t, r, recv, randBytes(t, nbytes)) // poison
		}
		guards[r] = randBytes(t, guard)
		w.write(t, r, recv+uint64(nbytes), guards[r])
	}
	name := kernels.AllReduceName(dt, op, algo)
	errs := w.launch(t, name, sc.Grid, kabi.BlockThreads, nil, func(r int) kabi.Params {
		p := w.params(r)
		p.Send, p.Recv, p.Stage, p.Count, p.Opcode, p.Flags = send, recv, stage, uint64(count), kernels.OpAllReduce, flags
		p.ElemBytes = uint32(dt.Size())
		if algo == kernels.LL {
			p.LLArea, p.LLLines = llOff, llCap
		}
		if flags != 0 {
			p.Send += w.uc[r]
			p.Recv += w.uc[r]
		}
		return p
	})
	for r, err := range errs {
		require.NoError(t, err, "rank %d", r)
		require.Equal(t, "ok", w.status(t, r).String(), "rank %d status", r)
	}
	out0 := w.read(t, 0, recv, nbytes)
	for r := range w.ranks {
		if r > 0 {
			assert.True(t, bytes.Equal(out0, w.read(t, r, recv, nbytes)), "rank %d's result differs from rank 0's", r)
		}
		assert.Equal(t, guards[r], w.read(t, r, recv+uint64(nbytes), guard), "rank %d: bytes past the output were written", r)
	}
	return out0
}

func TestAllReduceMatrix(t *testing.T) {
	rng, seed := kref.NewRNG()
	t.Logf("seed %d", seed)
	start := time.Now()
	for _, ranks := range []int{2, 3, 4, 8} {
		for _, f := range []kernels.Flavor{kernels.Unicast, kernels.Multicast} {
			w := newWorkspace(t, ranks, f)
			for _, dt := range kernels.DTypes {
				for _, op := range kernels.RedOps {
					if !kernels.Supported(f, dt, op) {
						continue
					}
					for _, algo := range kernels.Algos {
						for _, sc := range kref.SizeCases {
							t.Run(fmt.Sprintf("%d-ranks/%v/%v/%v_%v/%s", ranks, f, algo, dt, op, sc.Name), func(t *testing.T) {
								runAllReduce(t, w, rng, algo, dt, op, sc)
							})
						}
					}
				}
			}
		}
	}
	t.Logf("matrix took %v", time.Since(start))
}

// checkAllReduce reports the wrong elements of got (kref.CheckAllReduce).
func checkAllReduce(t *testing.T, dt kernels.DType, op kernels.RedOp, ins [][]byte, got []byte, count int) {
	t.Helper()
	checkWith(t, kref.CheckAllReduce, dt, op, ins, got, count)
}

// checkWith reports the wrong elements of got that oracle finds.
func checkWith(t *testing.T, oracle func(kernels.DType, kernels.RedOp, [][]byte, []byte, int, int) ([]kref.Mismatch, int), dt kernels.DType, op kernels.RedOp, ins [][]byte, got []byte, count int) {
	t.Helper()
	bad, n := oracle(dt, op, ins, got, count, 5)
	for _, m := range bad {
		t.Errorf("%v %v: %v", dt, op, m)
	}
	if n > len(bad) {
		t.Errorf("%d of %d elements wrong", n, count)
	}
}
