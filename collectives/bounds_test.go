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
					assert.Empty(t, f.node.CallsOf("cuLaunchKernel"), "launched despite the error")
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
