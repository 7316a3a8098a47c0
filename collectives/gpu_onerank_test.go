//go:build gpu

package collectives

import (
	"context"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/nvls-go/nvls/cuda"
	"github.com/nvls-go/nvls/kernels"
	"github.com/nvls-go/nvls/team"
)

// oneRankOps: the type and operator TestGPUOneRank runs each collective
// with (4-byte elements, root 0).
var oneRankOps = map[kernels.Coll]collOp{
	kernels.CollAllReduce:     {coll: kernels.CollAllReduce, dt: F32, op: Sum},
	kernels.CollBroadcast:     {coll: kernels.CollBroadcast, dt: U32},
	kernels.CollReduceScatter: {coll: kernels.CollReduceScatter, dt: F32, op: Max},
	kernels.CollAllGather:     {coll: kernels.CollAllGather, dt: U32},
	kernels.CollReduce:        {coll: kernels.CollReduce, dt: S32, op: Min},
}

// TestGPUOneRank: a team of one rank on GPU 0 (no kernel: a copy out of
// place, nothing in place) gives every collective's result, on fresh
// random bits, equal to its input bit for bit, from 8 bytes to 64 MiB.
//
//	NCCL_NVLS_ENABLE=0 ./.devbin/collectives.test -test.v -test.run GPUOneRank
func TestGPUOneRank(t *testing.T) {
	lib, err := cuda.Load()
	if err != nil {
		t.Skipf("no usable CUDA driver: %v", err)
	}
	const most = 64 << 20
	fr := newFloorRig(t, lib, 1, 3*most)
	a, err := fr.t.Alloc(most)
	require.NoError(t, err)
	b, err := fr.t.Alloc(most)
	require.NoError(t, err)
	t.Cleanup(func() { require.NoError(t, fr.t.Free(a)); require.NoError(t, fr.t.Free(b)) })
	rng := rand.New(rand.NewPCG(rand.Uint64(), 2))
	bg := context.Background()
	send, recv := []cuda.DevicePtr{a.Ptr(0)}, []cuda.DevicePtr{b.Ptr(0)}
	for _, coll := range []kernels.Coll{kernels.CollAllReduce, kernels.CollBroadcast, kernels.CollReduceScatter, kernels.CollAllGather, kernels.CollReduce} {
		for _, words := range []int{2, 1025, 1 << 18, most / 4} {
			for _, inPlace := range []bool{false, true} {
				t.Run(fmt.Sprintf("%v/%d B/in-place=%v", coll, 4*words, inPlace), func(t *testing.T) {
					in, junk := make([]uint32, words), make([]uint32, words)
					for i := range in {
						in[i], junk[i] = rng.Uint32(), rng.Uint32()
					}
					require.NoError(t, team.CopyIn(a, 0, in))
					require.NoError(t, team.CopyIn(b, 0, junk))
					r := recv
					if inPlace {
						r = send
					}
					o := oneRankOps[coll]
					o.count = words
					require.NoError(t, o.enqueue(fr.c, send, r, fr.streams))
					require.NoError(t, fr.c.Sync(bg, fr.streams))
					got := make([]uint32, words)
					out := b
					if inPlace {
						out = a
					}
					require.NoError(t, team.CopyOut(got, out, 0))
					require.Equal(t, in, got, "the one rank's input, bit for bit")
				})
			}
		}
	}
}
