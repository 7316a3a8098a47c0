package simkern

import (
	"fmt"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/nvls-go/nvls/cuda"
	"github.com/nvls-go/nvls/cuda/sim"
	"github.com/nvls-go/nvls/internal/kabi"
	"github.com/nvls-go/nvls/kernels"
)

// storeRecorder counts, per byte of every rank's recv, the stores that a
// rank's kernel made to it.
type storeRecorder struct {
	sim.Memory
	mu    *sync.Mutex
	uc    []uint64 // every rank's workspace
	recv  uint64
	n     int
	count [][]int // [destination rank][byte of recv], shared by the rank's launches
}

func (m *storeRecorder) Store(addr cuda.DevicePtr, src []byte) error {
	m.mu.Lock()
	for d, base := range m.uc {
		lo, hi := base+m.recv, base+m.recv+uint64(m.n)
		for a := max(uint64(addr), lo); a < min(uint64(addr)+uint64(len(src)), hi); a++ {
			m.count[d][a-lo]++
		}
	}
	m.mu.Unlock()
	return m.Memory.Store(addr, src)
}

// wantSlice is the byte range of an n-byte sliced broadcast on ranks ranks
// that rank copies, as issue 22 states it: the root copies nothing (unless
// it is alone); the others take nranks-1 slices of whole 16-byte vectors,
// slice j to the rank j+1 after the root, the last slice the rest. With
// all (kabi.FlagRootSlice) there are nranks slices, slice j to the rank j
// after the root, the root's slice 0.
func wantSlice(n, ranks, root, rank int, all bool) (lo, hi int) {
	if ranks == 1 {
		return 0, n
	}
	slices, skip := ranks-1, 1
	if all {
		slices, skip = ranks, 0
	} else if rank == root {
		return 0, 0
	}
	j := (rank - root - skip + ranks) % ranks
	vecs := n / 16 / slices
	lo = j * vecs * 16
	if j == slices-1 {
		return lo, n
	}
	return lo, lo + vecs*16
}

// TestBroadcastSlicedStores: in the unicast flavor with kabi.FlagSliced,
// every rank other than the root stores exactly its slice of the root's
// send (wantSlice) once into every rank's recv, the root's included, and
// the root stores nothing there; with kabi.FlagRootSlice too the root
// stores slice 0 of nranks, as before issue 22. Every rank's recv then
// holds the root's send, the bytes after it untouched, the root's send
// too when out of place. Every root, 1 to 8 ranks, sizes below one
// vector per slice, uneven ones and several blocks, in and out of place.
func TestBroadcastSlicedStores(t *testing.T) {
	for _, all := range []bool{false, true} {
		for _, ranks := range []int{1, 2, 3, 4, 8} {
			broadcastSlicedStores(t, ranks, all)
		}
	}
}

func broadcastSlicedStores(t *testing.T, ranks int, all bool) {
	w := newWorkspace(t, ranks, kernels.Unicast)
	slices, flags := max(ranks-1, 1), uint32(kabi.FlagSliced)
	if all {
		slices, flags = ranks, flags|kabi.FlagRootSlice
	}
	sizes := []struct {
		n    int
		grid uint32
	}{{1, 1}, {15, 1}, {16, 1}, {17, 2}, {16*slices - 1, 1}, {16 * slices, 1}, {16*slices + 5, 1},
		{16*7*slices + 16*3 + 9, 2}, {16*3*kabi.BlockThreads*slices + 16*5 + 7, 3}}
	for root := range ranks {
		for _, sz := range sizes {
			for _, inPlace := range []bool{false, true} {
				name := fmt.Sprintf("%d ranks root %d %d bytes grid %d in place %v root slice %v", ranks, root, sz.n, sz.grid, inPlace, all)
				checkBroadcastStores(t, w, name, root, sz.n, sz.grid, inPlace, flags, func(_, i int) int {
					for r := range ranks {
						if lo, hi := wantSlice(sz.n, ranks, root, r, all); i >= lo && i < hi {
							return r
						}
					}
					return -1
				})
			}
		}
	}
}

// checkBroadcastStores launches an n-byte broadcast from root with flags
// on every rank of w (fresh random send, recv and guards), checks that
// every rank's recv then holds the root's send, the bytes after it and
// the root's send (out of place) untouched, every status ok, and that
// byte i of rank d's recv was stored exactly once by rank storer(d, i)
// (none for -1) and by no other rank.
func checkBroadcastStores(t *testing.T, w *workspace, name string, root, n int, grid uint32, inPlace bool, flags uint32, storer func(d, i int) int) {
	t.Helper()
	ranks := len(w.uc)
	var mu sync.Mutex
	send := uint64(sendOff)
	recv := send + uint64(n+guard+15)/16*16
	if inPlace {
		recv = send
	}
	counts := make([][][]int, ranks) // [storing rank][destination rank][byte]
	for r := range ranks {
		counts[r] = make([][]int, ranks)
		for d := range ranks {
			counts[r][d] = make([]int, n)
		}
	}
	w.mem = func(r int, m sim.Memory) sim.Memory {
		return &storeRecorder{Memory: m, mu: &mu, uc: w.uc, recv: recv, n: n, count: counts[r]}
	}
	defer func() { w.mem = nil }()
	data := randBytes(t, n)
	guards := make([][]byte, ranks)
	for r := range ranks {
		w.write(t, r, send, randBytes(t, n))
		if r == root {
			w.write(t, r, send, data)
		}
		if r != root || !inPlace {
			w.write(t, r, recv, randBytes(t, n))
		}
		guards[r] = randBytes(t, guard)
		w.write(t, r, recv+uint64(n), guards[r])
	}
	errs := w.launch(t, kernels.BroadcastName, grid, kabi.BlockThreads, nil, func(r int) kabi.Params {
		p := w.params(r)
		p.Send, p.Recv, p.Count, p.ElemBytes, p.Root, p.Opcode = send, recv, uint64(n), 1, uint32(root), kernels.OpBroadcast
		p.Flags = flags
		if r != root {
			p.Send = recv // not read (it must still be a valid operand)
		}
		return p
	})
	for r := range ranks {
		require.NoError(t, errs[r], name)
		assert.Equal(t, "ok", w.status(t, r).String(), name)
		assert.Equal(t, data, w.read(t, r, recv, n), "%s: rank %d's recv", name, r)
		assert.Equal(t, guards[r], w.read(t, r, recv+uint64(n), guard), "%s: rank %d's guard", name, r)
	}
	if !inPlace {
		assert.Equal(t, data, w.read(t, root, send, n), "%s: the root's send", name)
	}
	for d := range ranks {
		for i := range n {
			want := storer(d, i)
			for r := range ranks {
				times := 0
				if r == want {
					times = 1
				}
				if c := counts[r][d][i]; c != times {
					t.Errorf("%s: rank %d stored byte %d of rank %d's recv %d times, want %d (storer %d)", name, r, i, d, c, times, want)
					return
				}
			}
		}
	}
}

// TestWantSlice: the slices of wantSlice tile [0, n) in the order of the
// ranks after the root (with the root's slice 0 first), start on whole
// vectors, and all but the last are equal.
func TestWantSlice(t *testing.T) {
	for _, all := range []bool{false, true} {
		for _, ranks := range []int{2, 3, 4, 8} {
			slices, skip := ranks-1, 1
			if all {
				slices, skip = ranks, 0
			}
			for _, n := range []int{1, 16, 16*slices - 1, 16*slices + 1, 1000, 12345} {
				root := ranks - 1
				next := 0
				for j := range slices {
					lo, hi := wantSlice(n, ranks, root, (root+skip+j)%ranks, all)
					assert.Equal(t, next, lo, "%d ranks %d bytes slice %d root slice %v", ranks, n, j, all)
					assert.Zero(t, lo%16)
					if j < slices-1 {
						assert.Equal(t, n/16/slices*16, hi-lo)
					}
					next = hi
				}
				assert.Equal(t, n, next)
				if !all {
					lo, hi := wantSlice(n, ranks, root, root, all)
					assert.Equal(t, lo, hi, "the root copies nothing")
				}
			}
		}
	}
}

// wantPushStorer is the rank that stores byte i of rank d's recv in an
// n-byte push broadcast (kabi.FlagPush) on ranks ranks, or -1 for none:
// the bytes after the last whole vector, the slice owner's own slice and
// the root's own recv (out of place) come from the root; every other byte
// of a slice from the slice's owner, the rank j+1 after the root.
func wantPushStorer(n, ranks, root, d, i int, inPlace bool) int {
	if d == root {
		if inPlace {
			return -1
		}
		return root
	}
	if i >= n/16*16 {
		return root
	}
	for j := range ranks - 1 {
		owner := (root + 1 + j) % ranks
		if lo, hi := wantSlice(n/16*16, ranks, root, owner, false); i >= lo && i < hi {
			if d == owner {
				return root
			}
			return owner
		}
	}
	panic("byte outside every slice")
}

// TestBroadcastPush: in the unicast flavor with kabi.FlagPush (3 ranks or
// more), every byte of every rank's recv is stored exactly once, by the
// rank wantPushStorer names, and ends up the root's; the bytes after the
// recv are untouched; every push flag is 0 again afterwards. Every root,
// sizes below a vector per slice, one piece, and several rounds of
// several blocks with a tail, in and out of place.
func TestBroadcastPush(t *testing.T) {
	piece := 16 * kabi.BlockThreads * kabi.PushVecs
	for _, ranks := range []int{3, 4, 8} {
		w := newWorkspaceSized(t, ranks, kernels.Unicast, 4*mib)
		slices := ranks - 1
		sizes := []struct {
			n    int
			grid uint32
		}{{1, 1}, {15, 1}, {16*slices - 1, 2}, {16*slices + 5, 1}, {piece*slices + 16*3, 2},
			{(piece*3+16*7)*slices + 9, 2}, {piece*3*slices + 16*5 + 7, 3}}
		for root := range ranks {
			for _, sz := range sizes {
				for _, inPlace := range []bool{false, true} {
					name := fmt.Sprintf("%d ranks root %d %d bytes grid %d in place %v", ranks, root, sz.n, sz.grid, inPlace)
					checkBroadcastStores(t, w, name, root, sz.n, sz.grid, inPlace, kabi.FlagPush|kabi.FlagSliced, func(d, i int) int { // push wins
						return wantPushStorer(sz.n, ranks, root, d, i, inPlace)
					})
					for r := range ranks {
						assert.Equal(t, make([]byte, 4*kabi.MaxBlocks), w.read(t, r, kabi.PushFlagOffset, 4*kabi.MaxBlocks), "%s: rank %d's push flags", name, r)
					}
				}
			}
		}
	}
}

// TestBroadcastPushTimeout: a root that does not push (launched without
// kabi.FlagPush, here the sliced broadcast, whose root copies nothing):
// the other ranks time out waiting for its data, in kabi.PhasePush, and
// the root fails at its end barrier (the failed team, or its own deadline,
// which runs out at about the same time).
func TestBroadcastPushTimeout(t *testing.T) {
	const ranks = 3
	w := newWorkspace(t, ranks, kernels.Unicast)
	errs := w.launch(t, kernels.BroadcastName, 2, kabi.BlockThreads, nil, func(r int) kabi.Params {
		p := w.params(r)
		p.Opcode, p.TimeoutNs = kernels.OpBroadcast, uint64(20*time.Millisecond)
		p.Send, p.Recv, p.Count, p.ElemBytes = sendOff, sendOff+8192, 4096, 1
		p.Check = kabi.CheckArgs(kernels.OpBroadcast, kernels.F32, 0, 0)
		p.Flags = kabi.FlagPush
		if r == 0 {
			p.Flags = kabi.FlagSliced
		}
		return p
	})
	for r := range ranks {
		require.NoError(t, errs[r])
	}
	for r := 1; r < ranks; r++ {
		s := w.status(t, r)
		assert.True(t, s.TimedOut() || s.Aborted(), "rank %d: %v", r, s)
		if s.TimedOut() {
			assert.Equal(t, uint32(kabi.PhasePush), s.Phase(), "rank %d: %v", r, s)
			assert.Contains(t, s.String(), "waiting for the root's data")
		}
	}
	if s := w.status(t, 0); !s.Aborted() {
		assert.Equal(t, kabi.TimeoutStatus(kernels.OpBroadcast, 1, s.Block()), s.Word, "the root: %v", s)
	}
	timedOut := 0
	for r := 1; r < ranks; r++ {
		if w.status(t, r).TimedOut() {
			timedOut++
		}
	}
	assert.Positive(t, timedOut, "a rank that waited for the root's data timed out")
}
