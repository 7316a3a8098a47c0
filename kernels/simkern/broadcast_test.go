package simkern

import (
	"fmt"
	"sync"
	"testing"

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
// slice j to the rank j+1 after the root, the last slice the rest.
func wantSlice(n, ranks, root, rank int) (lo, hi int) {
	if ranks == 1 {
		return 0, n
	}
	if rank == root {
		return 0, 0
	}
	j := (rank - root - 1 + ranks) % ranks
	vecs := n / 16 / (ranks - 1)
	lo = j * vecs * 16
	if j == ranks-2 {
		return lo, n
	}
	return lo, lo + vecs*16
}

// TestBroadcastSlicedStores: in the unicast flavor with kabi.FlagSliced,
// every rank other than the root stores exactly its slice of the root's
// send (wantSlice) once into every rank's recv, the root's included, and
// the root stores nothing there (with N slices, as before issue 22, the
// root stored one); every rank's recv then holds the root's send, the
// bytes after it untouched, the root's send too when out of place. Every
// root, 1 to 8 ranks, sizes below one vector per slice, uneven ones and
// several blocks, in and out of place.
func TestBroadcastSlicedStores(t *testing.T) {
	for _, ranks := range []int{1, 2, 3, 4, 8} {
		w := newWorkspace(t, ranks, kernels.Unicast)
		var mu sync.Mutex
		slices := max(ranks-1, 1)
		sizes := []struct {
			n    int
			grid uint32
		}{{1, 1}, {15, 1}, {16, 1}, {17, 2}, {16*slices - 1, 1}, {16 * slices, 1}, {16*slices + 5, 1},
			{16*7*slices + 16*3 + 9, 2}, {16*3*kabi.BlockThreads*slices + 16*5 + 7, 3}}
		for root := range ranks {
			for _, sz := range sizes {
				for _, inPlace := range []bool{false, true} {
					n := sz.n
					name := fmt.Sprintf("%d ranks root %d %d bytes grid %d in place %v", ranks, root, n, sz.grid, inPlace)
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
					data := randBytes(t, n)
					guards := make([][]byte, ranks)
					for r := range ranks {
						if r == root {
							w.write(t, r, send, data)
						} else {
							w.write(t, r, send, randBytes(t, n))
						}
						if r != root || !inPlace {
							w.write(t, r, recv, randBytes(t, n))
						}
						guards[r] = randBytes(t, guard)
						w.write(t, r, recv+uint64(n), guards[r])
					}
					errs := w.launch(t, kernels.BroadcastName, sz.grid, kabi.BlockThreads, nil, func(r int) kabi.Params {
						p := w.params(r)
						p.Send, p.Recv, p.Count, p.ElemBytes, p.Root, p.Opcode = send, recv, uint64(n), 1, uint32(root), kernels.OpBroadcast
						p.Flags = kabi.FlagSliced
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
					for r := range ranks {
						lo, hi := wantSlice(n, ranks, root, r)
						for d := range ranks {
							for i, c := range counts[r][d] {
								want := 0
								if i >= lo && i < hi {
									want = 1
								}
								if c != want {
									t.Errorf("%s: rank %d stored byte %d of rank %d's recv %d times, want %d (its slice [%d, %d))", name, r, i, d, c, want, lo, hi)
									break
								}
							}
						}
					}
				}
			}
		}
	}
}

// TestWantSlice: the slices of wantSlice tile [0, n) in the order of the
// ranks after the root, start on whole vectors, and all but the last are
// equal.
func TestWantSlice(t *testing.T) {
	for _, ranks := range []int{2, 3, 4, 8} {
		for _, n := range []int{1, 16, 16*(ranks-1) - 1, 16*(ranks-1) + 1, 1000, 12345} {
			root := ranks - 1
			next := 0
			for j := range ranks - 1 {
				lo, hi := wantSlice(n, ranks, root, (root+1+j)%ranks)
				assert.Equal(t, next, lo, "%d ranks %d bytes slice %d", ranks, n, j)
				assert.Zero(t, lo%16)
				if j < ranks-2 {
					assert.Equal(t, n/16/(ranks-1)*16, hi-lo)
				}
				next = hi
			}
			assert.Equal(t, n, next)
			lo, hi := wantSlice(n, ranks, root, root)
			assert.Equal(t, lo, hi, "the root copies nothing")
		}
	}
}
