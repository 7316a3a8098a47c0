//go:build gpu

package collectives

import (
	"context"
	"encoding/binary"
	"fmt"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"

	"github.com/nvls-go/nvls/cuda"
	"github.com/nvls-go/nvls/internal/gputest"
	"github.com/nvls-go/nvls/internal/teamlink"
	"github.com/nvls-go/nvls/kernels"
)

// TestGPUPDLAfterProducer: with PDL, a collective launched right after a
// kernel of the caller's that writes its send, on the same stream with
// nothing between, reads what that kernel wrote: kernel_entry's
// griddepcontrol.wait holds it until the producer has finished and its
// writes are visible. Each round a fill kernel (gputest.FillPTX: out[i] =
// val ^ i, a new val per rank and round) writes every rank's send, the
// all-reduce (u32 sum; LL, one-shot and two-shot sizes) follows at once,
// and every rank's result is checked against the sum of the vals' words:
// a collective that read before the fill finished sums stale words.
func TestGPUPDLAfterProducer(t *testing.T) {
	const size = 4 << 20
	r := newGPURig(t, 2*size, 0)
	modes := []PDL{PDLWait, PDLEarly}
	if teamlink.Of(r.t).MaxRanksOnDevice() > 1 {
		modes = modes[:1] // New refuses PDLEarly where ranks share a device
	}
	fills := make([]cuda.Function, r.n)
	for l := range r.n {
		require.NoError(t, onContext(r.d, r.t.Context(l), func() error {
			m, err := r.d.ModuleLoadData([]byte(gputest.FillPTX))
			if err != nil {
				return err
			}
			t.Cleanup(func() {
				_ = onContext(r.d, r.t.Context(l), func() error { return r.d.ModuleUnload(m) })
			})
			fills[l], err = r.d.ModuleGetFunction(m, gputest.FillEntry)
			return err
		}))
	}
	sendB, recvB := r.alloc(size), r.alloc(size)
	send, recv := make([]cuda.DevicePtr, r.n), make([]cuda.DevicePtr, r.n)
	for l := range r.n {
		send[l], recv[l] = sendB.Ptr(l), recvB.Ptr(l)
	}
	rng := newRNG(t)
	for _, mode := range modes {
		c, err := New(r.t, WithPDL(mode))
		if err != nil {
			t.Skipf("PDL %v: %v", mode, err)
		}
		require.Equal(t, mode, c.pdl)
		for _, count := range []uint32{3, 70001, size/4 - 7} {
			t.Run(fmt.Sprintf("%v count %d", mode, count), func(t *testing.T) {
				for round := range 5 {
					vals := make([]uint32, r.n)
					for l := range r.n {
						vals[l] = rng.Uint32()
						p := gputest.FillParams{Out: send[l], N: count, Val: vals[l]}
						require.NoError(t, onContext(r.d, r.t.Context(l), func() error {
							return r.d.LaunchKernel(fills[l], cuda.D1((count+255)/256), cuda.D1(256), 0, r.streams[l], unsafe.Pointer(&p), unsafe.Sizeof(p))
						}))
					}
					require.NoError(t, c.AllReduce(context.Background(), send, recv, uint64(count), U32, Sum, r.streams))
					require.NoError(t, c.Sync(context.Background(), r.streams))
					for l := range r.n {
						got := r.get(l, recv[l], int(4*count))
						for i := range count {
							var want uint32
							for _, v := range vals {
								want += v ^ i
							}
							if w := binary.LittleEndian.Uint32(got[4*i:]); w != want {
								require.Failf(t, "stale send", "round %d, rank %d, word %d: %#x, want %#x", round, l, i, w, want)
							}
						}
					}
				}
			})
		}
		require.NoError(t, c.Close())
	}
}

// TestGPUCopyEngine: the copy-engine all-gather (any team of 2 ranks or
// more), broadcast and reduce (2 ranks; the kernels in bigger teams) and
// all-reduce (a reduce-scatter half, then copies), with
// WithCopyEngineMin, in and out of place, from every root, give the right
// bytes on GPUs (the sim's TestCopyEngineGraph covers capture).
func TestGPUCopyEngine(t *testing.T) {
	const size = 8 << 20
	r := newGPURig(t, 20*size, 0) // two buffers of up to 8 ranks x size, the staging areas
	if r.n < 2 {
		t.Skipf("the copy-engine path is for teams of 2 ranks or more (%d here)", r.n)
	}
	c := r.comm(WithCopyEngineMin(1 << 20))
	if c.sharedDevs {
		require.False(t, c.usesCE(), "ranks share a device: no copy engines")
		t.Skip("ranks share a device: the copy engines are off there (usesCE, docs/perf.md run 57)")
	}
	require.True(t, c.usesCE())
	a, b := r.alloc(uint64(r.n)*size), r.alloc(uint64(r.n)*size)
	rng := newRNG(t)
	for _, count := range []int{(1 << 20) / 4, size / 4} {
		for _, inPlace := range []bool{false, true} {
			send, recv := r.ptrs(a), r.ptrs(b)
			if inPlace {
				recv = send
			}
			for root := range r.n {
				runBroadcast(t, r, c, rng, send, recv, F32, count, root)
			}
			agSend, agRecv := r.ptrs(a), r.ptrs(b)
			if inPlace {
				for l := range agSend {
					agSend[l] = agRecv[l] + cuda.DevicePtr(r.t.Rank(l)*count*4)
				}
			}
			runColl(t, r, c, rng, collOp{coll: kernels.CollAllGather, dt: F32, count: count}, agSend, agRecv)
			// The all-reduce's copy-engine half: slices of count elements.
			runAllReduce(t, r, c, rng, send, recv, F32, Sum, r.n*count)
			runAllReduce(t, r, c, rng, send, recv, BF16, Sum, 2*r.n*count)
			runAllReduce(t, r, c, rng, send, recv, S32, Min, r.n*count)
			// The reduce: by copy engine out of place in a team of 2
			// (a ragged last piece in the second), its kernels otherwise.
			for root := range r.n {
				runColl(t, r, c, rng, collOp{coll: kernels.CollReduce, dt: F32, op: Sum, count: r.n * count, root: root}, send, recv)
				runColl(t, r, c, rng, collOp{coll: kernels.CollReduce, dt: BF16, op: Max, count: 2*r.n*count - 3, root: root}, send, recv)
			}
		}
	}
}
