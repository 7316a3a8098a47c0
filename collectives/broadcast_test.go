package collectives

import (
	"bytes"
	"context"
	"fmt"
	"math/rand/v2"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/nvls-go/nvls/cuda"
	"github.com/nvls-go/nvls/team"
)

// runBroadcast writes a fresh input on the root and poison everywhere
// else, broadcasts, and checks every rank's recv, the guards, and that the
// root's send is untouched.
func runBroadcast(t *testing.T, f *fixture, rng *rand.Rand, send, recv []cuda.DevicePtr, dt DType, count, root int) {
	t.Helper()
	n := count * dt.Size()
	in := input(rng, dt, count)
	guards := make([][]byte, f.n)
	for l := range f.n {
		guards[l] = randomBytes(rng, guardBytes)
		if l != root || send[l] != recv[l] {
			f.write(recv[l], randomBytes(rng, n))
		}
		f.write(recv[l]+cuda.DevicePtr(n), guards[l])
	}
	f.write(send[root], in)
	require.NoError(t, f.c.Broadcast(context.Background(), send, recv, uint64(count), dt, root, f.streams))
	f.sync()
	for l := range f.n {
		got := f.read(recv[l], n+guardBytes)
		require.True(t, bytes.Equal(in, got[:n]), "rank %d: recv differs from root %d's send", l, root)
		require.True(t, bytes.Equal(guards[l], got[n:]), "rank %d: the %d bytes after recv were overwritten", l, guardBytes)
	}
	if send[root] != recv[root] {
		require.True(t, bytes.Equal(in, f.read(send[root], n)), "the root's send was modified")
	}
}

// TestBroadcastMatrix: from every root, for 2, 3, 4 and 8 ranks and both
// transports, sizes with a byte tail, one vector and several chunks and
// blocks, zero-copy and copy-in, in and out of place.
func TestBroadcastMatrix(t *testing.T) {
	type size struct {
		dt    DType
		count int
	}
	sizes := []size{{F16, 1}, {F16, 7}, {U32, 4}, {BF16, 1021}, {U64, 750}}
	modes := append(bufModes, bufMode{name: "root's send outside, recv symmetric"})
	for _, ranks := range []int{2, 3, 4, 8} {
		for _, tr := range transports() {
			t.Run(fmt.Sprintf("%d ranks %v", ranks, tr), func(t *testing.T) {
				f := newMatrixFixture(t, ranks, tr)
				rng := newRNG(t)
				sendB, recvB := f.alloc(matrixMax+guardBytes), f.alloc(matrixMax+guardBytes)
				for root := range ranks {
					for _, sz := range sizes {
						for i, m := range modes {
							send, recv := f.caseBuffers(m, sendB, recvB)
							if i == len(bufModes) {
								send[root] = f.foreign[root]
							}
							t.Run(fmt.Sprintf("root %d %v x %d %s", root, sz.dt, sz.count, m.name), func(t *testing.T) {
								runBroadcast(t, f, rng, send, recv, sz.dt, sz.count, root)
							})
						}
					}
				}
			})
		}
	}
}

// TestBroadcastNonRootSendIgnored: ranks other than the root may pass 0
// (or anything) as send: it is not read.
func TestBroadcastNonRootSendIgnored(t *testing.T) {
	f := newFixture(t, fixtureConfig{ranks: 3, transport: team.Unicast, dataBytes: 8 << 20})
	b := f.alloc(4096)
	send := make([]cuda.DevicePtr, 3)
	send[1] = b.Ptr(1)
	runBroadcast(t, f, newRNG(t), send, f.ptrs(b), S32, 1000, 1)
}

// TestBroadcastDefaults: 1 MiB with the default options, zero-copy, one
// launch per rank with the default grid.
func TestBroadcastDefaults(t *testing.T) {
	f := newFixture(t, fixtureConfig{ranks: 4, transport: team.Unicast, dataBytes: 8 << 20})
	a, b := f.alloc(1<<20+guardBytes), f.alloc(1<<20+guardBytes)
	f.node.ResetCalls()
	runBroadcast(t, f, newRNG(t), f.ptrs(a), f.ptrs(b), F32, 1<<18, 3)
	launches := f.node.CallsOf("cuLaunchKernel")
	assert.Len(t, launches, 4)
}
