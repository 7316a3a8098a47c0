package team

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/rand/v2"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
	"github.com/x448/float16"

	"github.com/nvls-go/nvls/cuda"
	"github.com/nvls-go/nvls/cuda/sim"
	"github.com/nvls-go/nvls/kernels"
)

// leBytes is the little-endian encoding of v, element by element, written
// here from each type's definition (the oracle the device's bytes are
// compared with).
func leBytes[T kernels.Elem](v []T) []byte {
	var out []byte
	for _, x := range v {
		switch x := any(x).(type) {
		case float32:
			out = binary.LittleEndian.AppendUint32(out, math.Float32bits(x))
		case int32:
			out = binary.LittleEndian.AppendUint32(out, uint32(x))
		case uint32:
			out = binary.LittleEndian.AppendUint32(out, x)
		case uint64:
			out = binary.LittleEndian.AppendUint64(out, x)
		case kernels.Float16:
			out = binary.LittleEndian.AppendUint16(out, uint16(x))
		case kernels.BFloat16:
			out = binary.LittleEndian.AppendUint16(out, uint16(x))
		case float16.Float16:
			out = binary.LittleEndian.AppendUint16(out, uint16(x))
		default:
			panic(fmt.Sprintf("leBytes: %T", x))
		}
	}
	return out
}

// roundTrip copies fresh values of one element type into every rank's
// copy of b from goroutines of its own (no worker, no context current),
// checks the device's bytes with the simulator's oracle, and reads them
// back with CopyOut, concurrently too.
func roundTrip[T kernels.Elem](t *testing.T, node *sim.Node, tm *Team, b Buffer, gen func() T) {
	t.Helper()
	n := int(b.Size()) / int(len(leBytes([]T{gen()})))
	in := make([][]T, tm.NumLocal())
	for l := range in {
		in[l] = make([]T, n)
		for i := range in[l] {
			in[l][i] = gen()
		}
	}
	var wg sync.WaitGroup
	errs := make([]error, tm.NumLocal())
	for l := range in {
		wg.Go(func() { errs[l] = CopyIn(b, l, in[l]) })
	}
	wg.Wait()
	for l := range in {
		require.NoError(t, errs[l], "rank %d", l)
		got, err := node.ReadDevice(b.Ptr(l), len(leBytes(in[l])))
		require.NoError(t, err)
		assert.Equal(t, leBytes(in[l]), got, "rank %d: device bytes", l)
	}
	out := make([][]T, tm.NumLocal())
	for l := range out {
		out[l] = make([]T, n)
		wg.Go(func() { errs[l] = CopyOut(out[l], b, l) })
	}
	wg.Wait()
	for l := range out {
		require.NoError(t, errs[l], "rank %d", l)
		assert.Equal(t, leBytes(in[l]), leBytes(out[l]), "rank %d: CopyOut", l)
	}
}

// TestTypedCopies: every element type of the collectives goes in and out
// of a team's buffer from any goroutine, the library making the rank's
// context current (issue 15: cuda.CopyHtoD off a worker fails with "no
// current context on this OS thread").
func TestTypedCopies(t *testing.T) {
	node := newNode(t, sim.Config{Devices: 3})
	tm, err := New(testCtx(t), node, devices(3), WithWorkspaceSize(smallData), quiet())
	require.NoError(t, err)
	defer func() { require.NoError(t, tm.Close()) }()
	b, err := tm.Alloc(4096)
	require.NoError(t, err)

	// Without the library, the calling thread has no context.
	assert.ErrorIs(t, cuda.CopyHtoD(node, b.Ptr(0), make([]byte, 16)), cuda.ErrInvalidContext)

	rng := rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64()))
	t.Run("f32", func(t *testing.T) { roundTrip(t, node, tm, b, func() float32 { return float32(rng.NormFloat64()) }) })
	t.Run("s32", func(t *testing.T) { roundTrip(t, node, tm, b, func() int32 { return int32(rng.Uint32()) }) })
	t.Run("u32", func(t *testing.T) { roundTrip(t, node, tm, b, rng.Uint32) })
	t.Run("u64", func(t *testing.T) { roundTrip(t, node, tm, b, rng.Uint64) })
	t.Run("f16", func(t *testing.T) {
		roundTrip(t, node, tm, b, func() kernels.Float16 { return kernels.Float16Of(float32(rng.NormFloat64())) })
	})
	t.Run("bf16", func(t *testing.T) {
		roundTrip(t, node, tm, b, func() kernels.BFloat16 { return kernels.BFloat16Of(float32(rng.NormFloat64())) })
	})
	t.Run("x448 f16", func(t *testing.T) {
		roundTrip(t, node, tm, b, func() float16.Float16 { return float16.Fromfloat32(float32(rng.NormFloat64())) })
	})
	// Fewer elements than the buffer holds: the rest is left as it was.
	before, err := node.ReadDevice(b.Ptr(1), int(b.Size()))
	require.NoError(t, err)
	require.NoError(t, CopyIn(b, 1, []uint32{7, 8}))
	after, err := node.ReadDevice(b.Ptr(1), int(b.Size()))
	require.NoError(t, err)
	assert.Equal(t, leBytes([]uint32{7, 8}), after[:8])
	assert.Equal(t, before[8:], after[8:])
	require.NoError(t, CopyIn(b, 1, []uint32(nil)), "nothing to copy")
}

// TestTypedCopyErrors: what a copy refuses, before any driver call.
func TestTypedCopyErrors(t *testing.T) {
	node := newNode(t, sim.Config{Devices: 2})
	tm, err := New(testCtx(t), node, devices(2), WithWorkspaceSize(smallData), quiet())
	require.NoError(t, err)
	b, err := tm.Alloc(64)
	require.NoError(t, err)
	freed, err := tm.Alloc(64)
	require.NoError(t, err)
	require.NoError(t, tm.Free(freed))
	again, err := tm.Alloc(64) // the same offset as freed, another buffer
	require.NoError(t, err)
	require.Equal(t, freed.Offset(), again.Offset())
	for _, tc := range []struct {
		name string
		err  error
		want string
	}{
		{"the zero Buffer", CopyIn(Buffer{}, 0, []float32{1}), "team: CopyIn: the zero Buffer"},
		{"local rank past the team", CopyIn(b, 2, []float32{1}), "team: CopyIn: local rank 2: the team has local ranks 0 to 1"},
		{"negative local rank", CopyOut(make([]float32, 1), b, -1), "team: CopyOut: local rank -1"},
		{"too many elements", CopyIn(b, 0, make([]float32, 17)), "team: CopyIn: 68 bytes do not fit in the 64-byte buffer at data offset"},
		{"too many to read", CopyOut(make([]uint64, 9), b, 1), "team: CopyOut: 72 bytes do not fit in the 64-byte buffer"},
		{"a freed buffer", CopyIn(freed, 0, []float32{1}), fmt.Sprintf("team: CopyIn: the buffer at data offset %d (64 bytes) is not live: freed", freed.Offset())},
	} {
		t.Run(tc.name, func(t *testing.T) {
			assert.ErrorIs(t, tc.err, ErrBadCopy)
			assert.ErrorContains(t, tc.err, tc.want)
		})
	}
	assert.Empty(t, node.CallsOf("cuMemcpyHtoD"))
	assert.Empty(t, node.CallsOf("cuMemcpyDtoH"))
	require.NoError(t, tm.Close())
	assert.ErrorIs(t, CopyIn(b, 0, []float32{1}), ErrClosed)
	assert.ErrorIs(t, CopyOut(make([]float32, 1), b, 0), ErrClosed)
}
