package simkern

import (
	"encoding/binary"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/nvls-go/nvls/internal/kabi"
	"github.com/nvls-go/nvls/kernels"
	"github.com/nvls-go/nvls/kernels/internal/kref"
)

// hostOff is where the tests point params.host_status: a word of the
// rank's own workspace, standing for the mapped host memory (any device
// address the kernel can store to).
const hostOff = 1<<20 + 512<<10

// launchShape is kref.SmallLaunch of k on w's rank r, with the host's
// copy of the status word at hostOff.
func launchShape(t testing.TB, w *workspace, k kernels.Kernel, r int) (grid, block uint32, p kabi.Params) {
	t.Helper()
	p = w.params(r)
	p.HostStatus = w.uc[r] + hostOff
	grid, block, p, err := kref.SmallLaunch(k, p, sendOff)
	require.NoError(t, err)
	return grid, block, p
}

// startsWithBarrier: the family's first wait is its start barrier, which
// is also its entry check (phase 0); the others check at entry
// (PhaseEntry).
func startsWithBarrier(k kernels.Kernel) bool { return k.Algo != kernels.LL }

func (w *workspace) hostStatus(t testing.TB, r int) uint64 {
	return binary.LittleEndian.Uint64(w.read(t, r, hostOff, 8))
}

// TestAbortAtEntry: every kernel of both flavors, launched on a rank whose
// team-failed word is set, returns at once (with a 20 s timeout and no
// peer launched), records that it gave up (the failing rank in its status
// word, which the host copy repeats) and completes no barrier.
func TestAbortAtEntry(t *testing.T) {
	for _, f := range []kernels.Flavor{kernels.Unicast, kernels.Multicast} {
		for _, k := range kernels.Kernels(f) {
			t.Run(fmt.Sprintf("%v/%s", f, k.Name()), func(t *testing.T) {
				w := newWorkspace(t, 2, f)
				failed := kabi.FailedWord(kabi.TimeoutStatus(kernels.OpBroadcast, 1, 3), 1)
				w.write(t, 0, kabi.FailedOffset, binary.LittleEndian.AppendUint64(nil, failed))
				grid, block, _ := launchShape(t, w, k, 0)
				start := time.Now()
				errs := w.launch(t, k.Name(), grid, block, []int{0}, func(r int) kabi.Params {
					_, _, p := launchShape(t, w, k, r)
					return p
				})
				require.NoError(t, errs[0])
				assert.Less(t, time.Since(start), 2*time.Second, "returned at once, not at its timeout")
				phase := uint32(kabi.PhaseEntry)
				if startsWithBarrier(k) {
					phase = 0
				}
				want := kabi.AbortStatus(k.Coll.Opcode(), phase, 0, failed)
				s := w.status(t, 0)
				assert.Equal(t, want, s.Word, "%v", s)
				assert.Equal(t, 1, s.FailedRank())
				assert.Equal(t, want, w.hostStatus(t, 0), "the host's copy")
				for b := range int(grid) {
					assert.Zero(t, w.u32(t, 0, slotOff(kabi.EpochOffset, 0, b)), "block %d passed the start barrier", b)
				}
				assert.Equal(t, failed, binary.LittleEndian.Uint64(w.read(t, 0, kabi.FailedOffset, 8)), "the team-failed word is left as it was")
			})
		}
	}
}

// TestFailureDrains: rank 3 never launches; rank 0's kernel has a short
// timeout, ranks 1 and 2 a long one. Rank 0 times out, marks the team
// failed on every rank, and ranks 1 and 2 give up while they wait instead
// of at their own deadline; a kernel launched afterwards on any rank
// returns at entry. Each rank's status word keeps its first code.
func TestFailureDrains(t *testing.T) {
	const timeout = 100 * time.Millisecond
	for _, f := range []kernels.Flavor{kernels.Unicast, kernels.Multicast} {
		for _, k := range []kernels.Kernel{
			{Coll: kernels.CollBarrier},
			{Coll: kernels.CollBroadcast},
			{Coll: kernels.CollAllReduce, Algo: kernels.OneShot, DType: kernels.F32, Op: kernels.Sum},
			{Coll: kernels.CollAllReduce, Algo: kernels.TwoShot, DType: kernels.U32, Op: kernels.Max},
			{Coll: kernels.CollAllReduce, Algo: kernels.LL, DType: kernels.BF16, Op: kernels.Sum},
			{Coll: kernels.CollReduceScatter, Algo: kernels.LL, DType: kernels.F32, Op: kernels.Sum},
			{Coll: kernels.CollAllGather, Algo: kernels.OneShot},
		} {
			t.Run(fmt.Sprintf("%v/%s", f, k.Name()), func(t *testing.T) {
				failureDrains(t, f, k, timeout)
			})
		}
	}
}

func failureDrains(t *testing.T, f kernels.Flavor, k kernels.Kernel, timeout time.Duration) {
	w := newWorkspace(t, 4, f)
	grid, block, _ := launchShape(t, w, k, 0)
	mk := func(r int) kabi.Params {
		_, _, p := launchShape(t, w, k, r)
		p.TimeoutNs = uint64(20 * time.Second)
		if r == 0 {
			p.TimeoutNs = uint64(timeout)
		}
		return p
	}
	start := time.Now()
	errs := w.launch(t, k.Name(), grid, block, []int{0, 1, 2}, mk)
	took := time.Since(start)
	assert.GreaterOrEqual(t, took, timeout)
	assert.Less(t, took, timeout+2*time.Second, "ranks 1 and 2 waited for their own deadline")
	code := kabi.TimeoutStatus(k.Coll.Opcode(), 0, 0)
	failed := kabi.FailedWord(code, 0)
	for r := range 3 {
		require.NoError(t, errs[r], "rank %d", r)
		want := code
		if r > 0 {
			want = kabi.AbortStatus(k.Coll.Opcode(), 0, 0, failed)
		}
		assert.Equal(t, want, w.status(t, r).Word, "rank %d: %v", r, w.status(t, r))
		assert.Equal(t, want, w.hostStatus(t, r), "rank %d: the host's copy", r)
	}
	for r := range 4 {
		assert.Equal(t, failed, binary.LittleEndian.Uint64(w.read(t, r, kabi.FailedOffset, 8)), "rank %d's team-failed word", r)
	}
	assert.Zero(t, w.status(t, 3).Word, "the rank that never ran")

	// Queued behind the failure: every rank, rank 3 too, returns at
	// entry; the ranks that had a code keep it, rank 3 records its abort.
	start = time.Now()
	errs = w.launch(t, k.Name(), grid, block, nil, mk)
	assert.Less(t, time.Since(start), time.Second, "a kernel queued behind the failure returns at once")
	for r := range 4 {
		require.NoError(t, errs[r], "rank %d", r)
	}
	assert.Equal(t, code, w.status(t, 0).Word, "the first failure's code stays")
	assert.True(t, w.status(t, 1).Aborted())
	s3 := w.status(t, 3)
	assert.True(t, s3.Aborted(), "%v", s3)
	assert.Equal(t, 0, s3.FailedRank())
}
