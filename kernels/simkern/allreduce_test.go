package simkern

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"math"
	"math/big"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/x448/float16"

	"github.com/nvls-go/nvls/kernels"
)

// randomInput returns count fresh random elements of dt: floats of both
// signs and varied magnitude (never NaN or Inf), integers over their whole
// range (so that sums wrap).
func randomInput(rng *rand.Rand, dt kernels.DType, count int) []byte {
	b := make([]byte, count*dt.Size())
	for i := range count {
		f := float32((rng.Float64()*2 - 1) * math.Ldexp(1, rng.IntN(8)-3))
		switch dt {
		case kernels.F32:
			binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(f))
		case kernels.F16:
			binary.LittleEndian.PutUint16(b[2*i:], float16.Fromfloat32(f).Bits())
		case kernels.BF16:
			binary.LittleEndian.PutUint16(b[2*i:], uint16(math.Float32bits(f)>>16))
		case kernels.S32, kernels.U32:
			binary.LittleEndian.PutUint32(b[4*i:], rng.Uint32())
		case kernels.U64:
			binary.LittleEndian.PutUint64(b[8*i:], rng.Uint64())
		}
	}
	return b
}

// decodeFloat reads element i of a 16/32-bit float array as float64.
func decodeFloat(dt kernels.DType, b []byte, i int) float64 {
	switch dt {
	case kernels.F32:
		return float64(math.Float32frombits(binary.LittleEndian.Uint32(b[4*i:])))
	case kernels.F16:
		return float64(float16.Frombits(binary.LittleEndian.Uint16(b[2*i:])).Float32())
	default: // BF16
		return float64(math.Float32frombits(uint32(binary.LittleEndian.Uint16(b[2*i:])) << 16))
	}
}

// ulp is the spacing of dt's values at |x| (mantissa bits m, smallest
// normal exponent emin).
func ulp(dt kernels.DType, x float64) float64 {
	m, emin := 23, -126
	switch dt {
	case kernels.F16:
		m, emin = 10, -14
	case kernels.BF16:
		m = 7
	}
	_, e := math.Frexp(math.Abs(x))
	return math.Ldexp(1, max(e-1, emin)-m)
}

// checkAllReduce compares got (count elements) with the reduction of ins,
// computed here in float64 / big integers, independently of the kernels'
// arithmetic.
func checkAllReduce(t *testing.T, dt kernels.DType, op kernels.RedOp, ins [][]byte, got []byte, count int) {
	t.Helper()
	bad := 0
	for i := range count {
		var ok bool
		var want, have string
		switch dt {
		case kernels.F32, kernels.F16, kernels.BF16:
			var s, abs float64
			m := decodeFloat(dt, ins[0], i)
			for _, in := range ins {
				x := decodeFloat(dt, in, i)
				s += x
				abs += math.Abs(x)
				if op == kernels.Min {
					m = math.Min(m, x)
				} else if op == kernels.Max {
					m = math.Max(m, x)
				}
			}
			g := decodeFloat(dt, got, i)
			if op == kernels.Sum {
				// f32 accumulation error, plus (16-bit types) one rounding
				// to nearest: half an ulp.
				tol := float64(len(ins)) * math.Ldexp(abs, -23)
				if dt != kernels.F32 {
					tol += ulp(dt, s) / 2
				}
				ok = math.Abs(g-s) <= tol
				want = fmt.Sprintf("%g (±%g)", s, tol)
			} else {
				ok = g == m
				want = fmt.Sprintf("%g", m)
			}
			have = fmt.Sprintf("%g", g)
		case kernels.S32, kernels.U32:
			var s int64
			var m int64
			for k, in := range ins {
				u := binary.LittleEndian.Uint32(in[4*i:])
				x := int64(u)
				if dt == kernels.S32 {
					x = int64(int32(u))
				}
				s += x
				if k == 0 || (op == kernels.Min && x < m) || (op == kernels.Max && x > m) {
					m = x
				}
			}
			w := uint32(m)
			if op == kernels.Sum {
				w = uint32(uint64(s) & 0xffffffff)
			}
			g := binary.LittleEndian.Uint32(got[4*i:])
			ok = g == w
			want, have = fmt.Sprint(w), fmt.Sprint(g)
		case kernels.U64:
			s := new(big.Int)
			var m uint64
			for k, in := range ins {
				x := binary.LittleEndian.Uint64(in[8*i:])
				s.Add(s, new(big.Int).SetUint64(x))
				if k == 0 || (op == kernels.Min && x < m) || (op == kernels.Max && x > m) {
					m = x
				}
			}
			w := m
			if op == kernels.Sum {
				w = new(big.Int).Mod(s, new(big.Int).Lsh(big.NewInt(1), 64)).Uint64()
			}
			g := binary.LittleEndian.Uint64(got[8*i:])
			ok = g == w
			want, have = fmt.Sprint(w), fmt.Sprint(g)
		}
		if !ok {
			bad++
			if bad <= 5 {
				t.Errorf("element %d of %d: got %s, want %s", i, count, have, want)
			}
		}
	}
	if bad > 5 {
		t.Errorf("%d of %d elements wrong", bad, count)
	}
}

type sizeCase struct {
	name    string
	count   func(per, ranks int) int // per: elements per 16-byte vector
	grid    uint32
	inPlace bool
}

var sizeCases = []sizeCase{
	{"one-element", func(int, int) int { return 1 }, 1, false},
	{"tail", func(per, _ int) int { return 2*per + 1 }, 2, false},
	{"one-vector", func(per, _ int) int { return per }, 3, false},
	{"ragged", func(per, n int) int { return (7*n+3)*per + per - 1 }, 2, false},
	{"blocks", func(per, _ int) int { return (3*kernels.BlockThreads+37)*per + per/2 }, 3, false},
	{"tail-in-place", func(per, _ int) int { return 2*per + 1 }, 2, true},
	{"blocks-in-place", func(per, _ int) int { return (3*kernels.BlockThreads+37)*per + 1 }, 3, true},
}

const (
	sendOff = kernels.SignalBytes
	guard   = 64
)

// runAllReduce runs one all-reduce on w with fresh random inputs and checks
// every rank's result, that the ranks agree bit for bit, that nothing past
// the output was written, and that the status words stay 0.
func runAllReduce(t *testing.T, w *workspace, rng *rand.Rand, algo kernels.Algo, dt kernels.DType, op kernels.RedOp, sc sizeCase) {
	per := kernels.VecBytes / dt.Size()
	count := sc.count(per, w.ranks)
	nbytes := count * dt.Size()
	span := uint64((nbytes + guard + kernels.VecBytes - 1) / kernels.VecBytes * kernels.VecBytes)
	send := uint64(sendOff)
	recv := send + span
	var stage uint64
	if sc.inPlace {
		recv = send
		if algo == kernels.OneShot {
			stage = send + span
		}
	}
	ins := make([][]byte, w.ranks)
	guards := make([][]byte, w.ranks)
	for r := range w.ranks {
		ins[r] = randomInput(rng, dt, count)
		w.write(t, r, send, ins[r])
		if !sc.inPlace {
			w.write(t, r, recv, randBytes(t, nbytes)) // poison
		}
		guards[r] = randBytes(t, guard)
		w.write(t, r, recv+uint64(nbytes), guards[r])
	}
	name := kernels.AllReduceName(dt, op, algo)
	errs := w.launch(t, name, sc.grid, kernels.BlockThreads, nil, func(r int) kernels.Params {
		p := w.params(r)
		p.Send, p.Recv, p.Stage, p.Count, p.Opcode = send, recv, stage, uint64(count), kernels.OpAllReduce
		return p
	})
	for r, err := range errs {
		require.NoError(t, err, "rank %d", r)
		require.Equal(t, "ok", w.status(t, r).String(), "rank %d status", r)
	}
	out0 := w.read(t, 0, recv, nbytes)
	checkAllReduce(t, dt, op, ins, out0, count)
	for r := range w.ranks {
		if r > 0 {
			assert.True(t, bytes.Equal(out0, w.read(t, r, recv, nbytes)), "rank %d's result differs from rank 0's", r)
		}
		assert.Equal(t, guards[r], w.read(t, r, recv+uint64(nbytes), guard), "rank %d: bytes past the output were written", r)
	}
}

func TestAllReduceMatrix(t *testing.T) {
	seed := rand.Uint64()
	t.Logf("seed %d", seed)
	rng := rand.New(rand.NewPCG(seed, seed^0x9e3779b97f4a7c15))
	start := time.Now()
	for _, ranks := range []int{2, 3, 4, 8} {
		for _, f := range []kernels.Flavor{kernels.Unicast, kernels.Multicast} {
			w := newWorkspace(t, ranks, f == kernels.Multicast)
			for _, dt := range kernels.DTypes {
				for _, op := range kernels.RedOps {
					if !kernels.Supported(f, dt, op) {
						continue
					}
					for _, algo := range kernels.Algos {
						for _, sc := range sizeCases {
							t.Run(fmt.Sprintf("%d-ranks/%v/%v/%v_%v/%s", ranks, f, algo, dt, op, sc.name), func(t *testing.T) {
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

func newRNG() *rand.Rand { return rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64())) }
