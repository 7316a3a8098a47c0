package collectives

import (
	"context"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/nvls-go/nvls/cuda"
	"github.com/nvls-go/nvls/team"
)

// boundsColls are the collectives that take team buffers: each runs with
// one pointer list as every argument that takes a buffer (in place, the
// root 0), count elements of u32.
var boundsColls = []struct {
	name string
	run  func(c *Comm, p []cuda.DevicePtr, count uint64, streams []cuda.Stream) error
}{
	{"AllReduce", func(c *Comm, p []cuda.DevicePtr, count uint64, s []cuda.Stream) error {
		return c.AllReduce(context.Background(), p, p, count, U32, Sum, s)
	}},
	{"Broadcast", func(c *Comm, p []cuda.DevicePtr, count uint64, s []cuda.Stream) error {
		return c.Broadcast(context.Background(), p, p, count, U32, 0, s)
	}},
}

// TestBufferBounds: a pointer inside the team's workspace must lie, with
// its whole count, inside one live buffer of Alloc. A count that runs past
// the end of buffer A into buffer B, and a pointer into a freed buffer,
// are ErrInvalid before anything is launched or copied, naming the
// buffer's bounds, and B is left as it was (issue 15: the all-reduce
// returned nil and overwrote B). Exactly A's size runs.
func TestBufferBounds(t *testing.T) {
	const ranks, n = 3, 64 // n u32 elements in A
	f := newFixture(t, fixtureConfig{ranks: ranks, transport: team.Unicast})
	a, b := f.alloc(n*4), f.alloc(n*4)
	require.Equal(t, a.Offset()+a.Size(), b.Offset(), "A and B adjacent in the data area")
	freed, err := f.t.Alloc(n * 4)
	require.NoError(t, err)
	require.NoError(t, f.t.Free(freed))
	rng := newRNG(t)
	bIn := make([][]byte, ranks)
	for l := range ranks {
		bIn[l] = randomBytes(rng, n*4)
		f.write(b.Ptr(l), bIn[l])
	}
	for _, coll := range boundsColls {
		t.Run(coll.name, func(t *testing.T) {
			for _, tc := range []struct {
				name  string
				p     []cuda.DevicePtr
				count uint64
				want  []string
			}{
				{"past the end of A", f.ptrs(a), 2 * n, []string{fmt.Sprintf("%d bytes at data offset %d run past the end of their team buffer [%d, %d)", 2*n*4, a.Offset(), a.Offset(), a.Offset()+a.Size()), fmt.Sprintf("by %d bytes", n*4)}},
				{"from A's middle past its end", shifted(f.ptrs(a), 16), n, []string{fmt.Sprintf("data offset %d run past the end of their team buffer [%d, %d)", a.Offset()+16, a.Offset(), a.Offset()+a.Size()), "by 16 bytes"}},
				{"a freed buffer", f.ptrs(freed), n, []string{fmt.Sprintf("at data offset %d are in the team's workspace but in no live buffer", freed.Offset()), "freed, or never allocated"}},
			} {
				t.Run(tc.name, func(t *testing.T) {
					f.node.ResetCalls()
					err := coll.run(f.c, tc.p, tc.count, f.streams)
					require.Error(t, err)
					assert.ErrorIs(t, err, ErrInvalid)
					assert.Contains(t, err.Error(), coll.name)
					assert.Contains(t, err.Error(), "[0] (rank 0)")
					for _, w := range tc.want {
						assert.Contains(t, err.Error(), w)
					}
					assert.Empty(t, f.node.CallsOf("cuLaunchKernelEx"), "launched despite the error")
					assert.Empty(t, f.node.CallsOf("cuMemcpyDtoDAsync"), "copied despite the error")
				})
			}
			require.NoError(t, coll.run(f.c, f.ptrs(a), n, f.streams), "exactly A's size")
			f.sync()
			for l := range ranks {
				assert.Equal(t, bIn[l], f.read(b.Ptr(l), n*4), "rank %d: B changed", l)
			}
		})
	}
}

// shifted is p with every pointer moved by d bytes.
func shifted(p []cuda.DevicePtr, d uint64) []cuda.DevicePtr {
	q := make([]cuda.DevicePtr, len(p))
	for i, x := range p {
		q[i] = x + cuda.DevicePtr(d)
	}
	return q
}

// TestBufferBoundsEverySide: each collective's send and recv are checked
// against the team buffer they point into with the size that side
// really has (issue 24: a reduce-scatter whose send was checked against
// recvcount instead of nranks x recvcount passed every test). One side
// at a time lies in buffer A, too small for it by one element's worth
// of the collective's layout, the other side in a large buffer C: the
// call is ErrInvalid naming the side, nothing is launched or copied, and
// buffer B after A is left as it was.
func TestBufferBoundsEverySide(t *testing.T) {
	const ranks, n = 3, 192 // A holds n u32 elements (768 bytes: whole 256-byte allocation units)
	f := newFixture(t, fixtureConfig{ranks: ranks, transport: team.Unicast})
	a, b := f.alloc(n*4), f.alloc(n*4)
	require.Equal(t, a.Offset()+a.Size(), b.Offset(), "A and B adjacent in the data area")
	c := f.alloc(4 * ranks * n * 4)
	rng := newRNG(t)
	bIn := make([][]byte, ranks)
	for l := range ranks {
		bIn[l] = randomBytes(rng, n*4)
		f.write(b.Ptr(l), bIn[l])
	}
	ctx := context.Background()
	A, C := f.ptrs(a), f.ptrs(c)
	// per is the count whose side in A needs exactly n elements; each case
	// runs it plus one (too much for A) and then it alone (fits).
	for _, tc := range []struct {
		name, side string
		per        uint64
		run        func(count uint64) error
	}{
		{"ReduceScatter", "send", n / ranks, func(k uint64) error { return f.c.ReduceScatter(ctx, A, C, k, U32, Sum, f.streams) }},
		{"ReduceScatter", "recv", n, func(k uint64) error { return f.c.ReduceScatter(ctx, C, A, k, U32, Sum, f.streams) }},
		{"AllGather", "recv", n / ranks, func(k uint64) error { return f.c.AllGather(ctx, C, A, k, U32, f.streams) }},
		{"AllGather", "send", n, func(k uint64) error { return f.c.AllGather(ctx, A, C, k, U32, f.streams) }},
		{"Reduce", "send", n, func(k uint64) error { return f.c.Reduce(ctx, A, C, k, U32, Sum, 0, f.streams) }},
		{"Reduce", "recv", n, func(k uint64) error { return f.c.Reduce(ctx, C, A, k, U32, Sum, 0, f.streams) }},
		{"AllReduce", "send", n, func(k uint64) error { return f.c.AllReduce(ctx, A, C, k, U32, Sum, f.streams) }},
		{"AllReduce", "recv", n, func(k uint64) error { return f.c.AllReduce(ctx, C, A, k, U32, Sum, f.streams) }},
		{"Broadcast", "send", n, func(k uint64) error { return f.c.Broadcast(ctx, A, C, k, U32, 0, f.streams) }},
		{"Broadcast", "recv", n, func(k uint64) error { return f.c.Broadcast(ctx, C, A, k, U32, 0, f.streams) }},
	} {
		t.Run(tc.name+"/"+tc.side, func(t *testing.T) {
			f.node.ResetCalls()
			err := tc.run(tc.per + 1)
			require.Error(t, err, "a %s of %d elements per rank in A", tc.side, tc.per+1)
			assert.ErrorIs(t, err, ErrInvalid)
			assert.Contains(t, err.Error(), tc.side)
			assert.Contains(t, err.Error(), "run past the end of their team buffer")
			assert.Empty(t, f.node.CallsOf("cuLaunchKernelEx"), "launched despite the error")
			assert.Empty(t, f.node.CallsOf("cuMemcpyDtoDAsync"), "copied despite the error")
			require.NoError(t, tc.run(tc.per), "exactly A's size")
			f.sync()
			for l := range ranks {
				assert.Equal(t, bIn[l], f.read(b.Ptr(l), n*4), "rank %d: B changed", l)
			}
		})
	}
}
