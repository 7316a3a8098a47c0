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

// TestLocalReduceScatter: the one-shot reduce-scatter with FlagLocal
// reduces from the rank's own memory alone (source q at stage + q x
// slice, the own at send + rank x slice) into slot rank of the stage
// area, the copy-engine all-reduce's layout, in one launch or in two
// chunks of half a slice (call_count giving the slice). Each rank is
// launched by itself: with no barrier it must not wait for the others.
// Against kref's reduction in rank order; the other slots and past the
// area unchanged.
func TestLocalReduceScatter(t *testing.T) {
	rng, seed := kref.NewRNG()
	t.Logf("seed %d", seed)
	for _, ranks := range []int{2, 3, 5} {
		w := newWorkspace(t, ranks, kernels.Unicast)
		for _, k := range []kernels.Kernel{{DType: kernels.F32, Op: kernels.Sum}, {DType: kernels.BF16, Op: kernels.Max}} {
			k.Coll, k.Algo = kernels.CollReduceScatter, kernels.OneShot
			e := k.DType.Size()
			per := kabi.VecBytes / e
			for _, count := range []int{per, 4 * per, 5 * per, (2*kabi.BlockThreads + 37) * per, (2*kabi.BlockThreads + 38) * per} {
				chunks := 1 + (count/per+1)%2 // two where half a slice is whole vectors
				t.Run(fmt.Sprintf("%d-ranks/%s/%d/chunks-%d", ranks, k.Name(), count, chunks), func(t *testing.T) {
					slice := count * e
					stage := uint64(sendOff + (ranks*slice+guard+kabi.VecBytes-1)/kabi.VecBytes*kabi.VecBytes)
					sends, stages := make([][]byte, ranks), make([][]byte, ranks)
					for r := range ranks {
						sends[r] = kref.Input(rng, k.DType, ranks*count)
						stages[r] = append(kref.Input(rng, k.DType, ranks*count), kref.Bytes(rng, guard)...)
						w.write(t, r, sendOff, sends[r])
						w.write(t, r, stage, stages[r])
					}
					m := count / chunks
					for r := range ranks {
						for c := range chunks {
							at := uint64(c * m * e)
							errs := w.launch(t, k.Name(), uint32(1+r%3), kabi.BlockThreads, []int{r}, func(r int) kabi.Params {
								p := w.params(r)
								p.Count, p.CallCount, p.ElemBytes, p.Opcode = uint64(m), uint64(ranks*count), uint32(e), k.Coll.Opcode()
								p.Send, p.Recv, p.Stage, p.Flags = sendOff+uint64(r*slice)+at, stage+uint64(r*slice)+at, stage+at, kabi.FlagLocal
								return p
							})
							require.NoError(t, errs[r], "rank %d chunk %d", r, c)
							assert.Equal(t, "ok", w.status(t, r).String())
						}
					}
					for r := range ranks {
						srcs := make([][]byte, ranks)
						for q := range srcs {
							srcs[q] = stages[r][q*slice : (q+1)*slice]
						}
						srcs[r] = sends[r][r*slice : (r+1)*slice]
						got := w.read(t, r, stage, len(stages[r]))
						checkAllReduce(t, k.DType, k.Op, srcs, got[r*slice:(r+1)*slice], count)
						assert.Equal(t, stages[r][:r*slice], got[:r*slice], "rank %d: the slots before its own changed", r)
						assert.Equal(t, stages[r][(r+1)*slice:], got[(r+1)*slice:], "rank %d: the slots after its own, or the guard, changed", r)
					}
				})
			}
		}
	}
}

// TestLocalContract: FlagLocal needs a stage area clear of send and whole
// 16-byte vectors a slice.
func TestLocalContract(t *testing.T) {
	w := newWorkspace(t, 2, kernels.Unicast)
	name := kernels.Kernel{Coll: kernels.CollReduceScatter, Algo: kernels.OneShot, DType: kernels.F32, Op: kernels.Sum}.Name()
	for _, tc := range []struct {
		what  string
		count uint64
		stage uint64
	}{
		{"no stage", 64, 0},
		{"stage over send", 64, sendOff + 128},
		{"a slice not whole vectors", 63, sendOff + 1<<17},
	} {
		t.Run(tc.what, func(t *testing.T) {
			errs := w.launch(t, name, 1, kabi.BlockThreads, []int{0}, func(r int) kabi.Params {
				p := w.params(r)
				p.Count, p.CallCount, p.ElemBytes, p.Opcode = tc.count, 2*tc.count, 4, kernels.CollReduceScatter.Opcode()
				p.Send, p.Recv, p.Stage, p.Flags = sendOff, sendOff+1<<16, tc.stage, kabi.FlagLocal
				return p
			})
			require.Error(t, errs[0])
			assert.ErrorIs(t, errs[0], ErrContract)
		})
	}
}

// TestLocalReduce: the one-shot reduce with FlagLocal, launched on the
// root alone, reduces from the root's own memory: the other ranks'
// contributions packed at stage (rank r's at slot r, r - 1 past the
// root), the own at send, into recv, which is either an area of its own
// or the first source itself (the copy-engine reduce lands the peer's
// data in the root's recv). Against kref's reduction in rank order; the
// sources it does not overwrite and the guard past them unchanged.
func TestLocalReduce(t *testing.T) {
	rng, seed := kref.NewRNG()
	t.Logf("seed %d", seed)
	for _, ranks := range []int{2, 3, 5} {
		w := newWorkspace(t, ranks, kernels.Unicast)
		for _, k := range []kernels.Kernel{{DType: kernels.F32, Op: kernels.Sum}, {DType: kernels.BF16, Op: kernels.Max}, {DType: kernels.S32, Op: kernels.Min}} {
			k.Coll, k.Algo = kernels.CollReduce, kernels.OneShot
			e := k.DType.Size()
			per := kabi.VecBytes / e
			for _, count := range []int{1, per, 3*per + 1, (2*kabi.BlockThreads + 37) * per} {
				for _, alias := range []bool{false, true} {
					root := (count + int(k.Op)) % ranks
					t.Run(fmt.Sprintf("%d-ranks/%s/%d/root-%d/alias-%v", ranks, k.Name(), count, root, alias), func(t *testing.T) {
						bytes := count * e
						chunk := (bytes + kabi.VecBytes - 1) / kabi.VecBytes * kabi.VecBytes
						stage := uint64(sendOff + chunk + kabi.VecBytes)
						recv := stage + uint64((ranks-1)*chunk+guard+kabi.VecBytes-1)/kabi.VecBytes*kabi.VecBytes
						if alias {
							recv = stage
						}
						send := kref.Input(rng, k.DType, count)
						// The sources packed a chunk apart; the guard after them.
						area := kref.Bytes(rng, (ranks-1)*chunk+guard)
						srcs := make([][]byte, ranks)
						for r, w := 0, 0; r < ranks; r++ {
							if r == root {
								srcs[r] = send
								continue
							}
							copy(area[w*chunk:], kref.Input(rng, k.DType, count))
							srcs[r] = append([]byte(nil), area[w*chunk:w*chunk+bytes]...)
							w++
						}
						recvBefore := kref.Bytes(rng, bytes+guard)
						w.write(t, root, sendOff, send)
						w.write(t, root, stage, area)
						if !alias {
							w.write(t, root, recv, recvBefore)
						}
						errs := w.launch(t, k.Name(), uint32(1+count%3), kabi.BlockThreads, []int{root}, func(r int) kabi.Params {
							p := w.params(r)
							p.Count, p.ElemBytes, p.Opcode, p.Root = uint64(count), uint32(e), k.Coll.Opcode(), uint32(root)
							p.Send, p.Recv, p.Stage, p.Flags = sendOff, recv, stage, kabi.FlagLocal
							return p
						})
						require.NoError(t, errs[root])
						assert.Equal(t, "ok", w.status(t, root).String())
						got := w.read(t, root, recv, bytes)
						checkAllReduce(t, k.DType, k.Op, srcs, got, count)
						after := w.read(t, root, stage, len(area))
						from := 0
						if alias {
							from = bytes
						}
						assert.Equal(t, area[from:], after[from:], "the sources past recv, or the guard, changed")
						if !alias {
							assert.Equal(t, recvBefore[bytes:], w.read(t, root, recv+uint64(bytes), guard), "past recv changed")
						}
					})
				}
			}
		}
	}
}

// TestLocalReduceContract: the local reduce runs on the root only, with a
// stage clear of send, and a recv that is one of the sources or clear of
// them; FlagPieces only with FlagLocal, in a team of 2.
func TestLocalReduceContract(t *testing.T) {
	w := newWorkspace(t, 3, kernels.Unicast)
	name := kernels.Kernel{Coll: kernels.CollReduce, Algo: kernels.OneShot, DType: kernels.F32, Op: kernels.Sum}.Name()
	stage := uint64(sendOff + 1<<16)
	for _, tc := range []struct {
		what              string
		rank              int
		stage, recv, send uint64
		flags             uint32
	}{
		{"not the root", 1, stage, stage, sendOff, kabi.FlagLocal},
		{"no stage", 0, 0, stage, sendOff, kabi.FlagLocal},
		{"stage over send", 0, stage, stage + 1<<16, stage + 256, kabi.FlagLocal},
		{"recv across two sources", 0, stage, stage + 128, sendOff, kabi.FlagLocal},
		{"pieces in a team of 3", 0, stage, stage, sendOff, kabi.FlagLocal | kabi.FlagPieces},
		{"pieces without local", 0, 0, stage, sendOff, kabi.FlagPieces},
	} {
		t.Run(tc.what, func(t *testing.T) {
			errs := w.launch(t, name, 1, kabi.BlockThreads, []int{tc.rank}, func(r int) kabi.Params {
				p := w.params(r)
				p.Count, p.ElemBytes, p.Opcode, p.Root = 64, 4, kernels.CollReduce.Opcode(), 0
				p.Send, p.Recv, p.Stage, p.Flags = tc.send, tc.recv, tc.stage, tc.flags
				return p
			})
			require.Error(t, errs[tc.rank])
			assert.ErrorIs(t, errs[tc.rank], ErrContract)
		})
	}
}

// TestLocalReducePieces: with FlagPieces too, the root's local reduce of a
// 2-rank team waits for each piece (kabi.CEPieceStart) of the peer's data
// to land in its recv, which the flag word of the piece says by holding
// the root's start-barrier sequence word, and reduces it: here the pieces
// land one by one from another goroutine, after the launch began, in
// order, each flag after its piece. A flag that holds another sequence (0,
// never written, while the sequence is past 2^31) is not taken: the
// launch times out at that piece with the data before it reduced. Against
// kref's reduction in rank order.
func TestLocalReducePieces(t *testing.T) {
	rng, seed := kref.NewRNG()
	t.Logf("seed %d", seed)
	w := newWorkspace(t, 2, kernels.Unicast)
	for _, k := range []kernels.Kernel{{DType: kernels.F32, Op: kernels.Sum}, {DType: kernels.BF16, Op: kernels.Max}} {
		k.Coll, k.Algo = kernels.CollReduce, kernels.OneShot
		e := k.DType.Size()
		per := kabi.VecBytes / e
		for _, tc := range []struct {
			count int
			stale int // the piece whose flag is stale; -1: none
		}{{3, -1}, {128 * per, -1}, {4096*per + 5, -1}, {4096 * per, 5}} {
			for root := range 2 {
				name := fmt.Sprintf("%s/%d/root-%d/stale-%d", k.Name(), tc.count, root, tc.stale)
				bytes := tc.count * e
				recv := uint64(sendOff + (bytes+kabi.VecBytes-1)/kabi.VecBytes*kabi.VecBytes + kabi.VecBytes)
				seq := uint32(rng.Uint64()) | 1
				if tc.stale >= 0 {
					seq |= 1 << 31
				}
				var word [4]byte
				binary.LittleEndian.PutUint32(word[:], seq)
				w.write(t, root, kabi.EpochOffset, word[:])
				w.write(t, root, kabi.CEFlagOffset, make([]byte, 4*kabi.CEPieces*kabi.MaxRanks))
				send, peer := kref.Input(rng, k.DType, tc.count), kref.Input(rng, k.DType, tc.count)
				w.write(t, root, sendOff, send)
				w.write(t, root, recv, kref.Bytes(rng, bytes))
				done := make(chan struct{})
				go func() {
					defer close(done)
					for i := range kabi.CEPieces {
						lo, hi := kabi.CEPieceStart(i, uint64(tc.count), uint64(per)), kabi.CEPieceStart(i+1, uint64(tc.count), uint64(per))
						w.write(t, root, recv+lo*uint64(e), peer[lo*uint64(e):hi*uint64(e)])
						flag := seq
						if i == tc.stale {
							flag = 0 // never written, seq past 2^31: under a wrap-safe >= it would pass
						}
						binary.LittleEndian.PutUint32(word[:], flag)
						w.write(t, root, kabi.CEFlag(i, 1-root), word[:])
						time.Sleep(time.Millisecond)
					}
				}()
				// One block where a piece times out: the simulator runs a
				// launch's blocks one after another, and a block that finds
				// the team failed by an earlier one's timeout gives up at
				// entry, where on a GPU it would have run beside it.
				grid := uint32(2)
				if tc.stale >= 0 {
					grid = 1
				}
				errs := w.launch(t, k.Name(), grid, kabi.BlockThreads, []int{root}, func(r int) kabi.Params {
					p := w.params(r)
					p.Count, p.ElemBytes, p.Opcode, p.Root = uint64(tc.count), uint32(e), k.Coll.Opcode(), uint32(root)
					p.Send, p.Recv, p.Stage, p.Flags = sendOff, recv, recv, kabi.FlagLocal|kabi.FlagPieces
					if tc.stale >= 0 {
						p.TimeoutNs = uint64(200 * time.Millisecond)
					}
					return p
				})
				<-done
				require.NoError(t, errs[root], name)
				srcs := [][]byte{send, peer}
				if root == 1 {
					srcs = [][]byte{peer, send}
				}
				got := w.read(t, root, recv, bytes)
				if tc.stale < 0 {
					assert.Equal(t, "ok", w.status(t, root).String(), name)
					checkAllReduce(t, k.DType, k.Op, srcs, got, tc.count)
					continue
				}
				assert.Equal(t, kabi.TimeoutStatus(k.Coll.Opcode(), 1, 0), w.status(t, root).Word, name)
				n := int(kabi.CEPieceStart(tc.stale, uint64(tc.count), uint64(per)))
				cut := func(b []byte) []byte { return b[:n*e] }
				checkAllReduce(t, k.DType, k.Op, [][]byte{cut(srcs[0]), cut(srcs[1])}, cut(got), n)
				assert.Equal(t, peer[n*e:], got[n*e:], "%s: the pieces from the stale one on are as they landed", name)
				for r := range 2 {
					assert.NotZero(t, binary.LittleEndian.Uint64(w.read(t, r, kabi.FailedOffset, 8)), "%s: rank %d's team-failed word", name, r)
				}
				for r := range 2 { // the timeout failed the team: a fresh start
					w.write(t, r, kabi.StatusOffset, make([]byte, 8))
					w.write(t, r, kabi.FailedOffset, make([]byte, 8))
				}
			}
		}
	}
}

// TestLocalReduceScatterPieces: the reduce-scatter's local reduce with
// FlagPieces waits, for each piece (kabi.CEPieceStart) of its slice, for
// every other rank's piece to land in its slot of the stage area, which
// that rank's flag word for the piece says (kabi.CEFlag), and reduces it:
// the pieces land from another goroutine while the launch runs, the
// sources' pieces in turn, each flag after its piece. Against kref's
// reduction in rank order; the other slots unchanged.
func TestLocalReduceScatterPieces(t *testing.T) {
	rng, seed := kref.NewRNG()
	t.Logf("seed %d", seed)
	for _, ranks := range []int{2, 3, 4} {
		w := newWorkspace(t, ranks, kernels.Unicast)
		k := kernels.Kernel{Coll: kernels.CollReduceScatter, Algo: kernels.OneShot, DType: kernels.F32, Op: kernels.Sum}
		e := k.DType.Size()
		per := kabi.VecBytes / e
		for _, count := range []int{per, 1024 * per} {
			for r := range ranks {
				name := fmt.Sprintf("%d ranks, %d, rank %d", ranks, count, r)
				slice := count * e
				stage := uint64(sendOff + (ranks*slice+guard+kabi.VecBytes-1)/kabi.VecBytes*kabi.VecBytes)
				seq := uint32(rng.Uint64()) | 1
				var word [4]byte
				binary.LittleEndian.PutUint32(word[:], seq)
				w.write(t, r, kabi.EpochOffset, word[:])
				w.write(t, r, kabi.CEFlagOffset, make([]byte, 4*kabi.CEPieces*kabi.MaxRanks))
				send := kref.Input(rng, k.DType, ranks*count)
				before := kref.Bytes(rng, ranks*slice)
				w.write(t, r, sendOff, send)
				w.write(t, r, stage, before)
				srcs := make([][]byte, ranks)
				for q := range ranks {
					srcs[q] = kref.Input(rng, k.DType, count)
				}
				srcs[r] = send[r*slice : (r+1)*slice]
				done := make(chan struct{})
				go func() {
					defer close(done)
					for i := range kabi.CEPieces {
						lo, hi := kabi.CEPieceStart(i, uint64(count), uint64(per))*uint64(e), kabi.CEPieceStart(i+1, uint64(count), uint64(per))*uint64(e)
						for j := 1; j < ranks; j++ {
							q := (r + j) % ranks
							w.write(t, r, stage+uint64(q*slice)+lo, srcs[q][lo:hi])
							w.write(t, r, kabi.CEFlag(i, q), word[:])
						}
						time.Sleep(500 * time.Microsecond)
					}
				}()
				errs := w.launch(t, k.Name(), 2, kabi.BlockThreads, []int{r}, func(int) kabi.Params {
					p := w.params(r)
					p.Count, p.CallCount, p.ElemBytes, p.Opcode = uint64(count), uint64(ranks*count), uint32(e), k.Coll.Opcode()
					p.Send, p.Recv, p.Stage, p.Flags = sendOff+uint64(r*slice), stage+uint64(r*slice), stage, kabi.FlagLocal|kabi.FlagPieces
					return p
				})
				<-done
				require.NoError(t, errs[r], name)
				assert.Equal(t, "ok", w.status(t, r).String(), name)
				got := w.read(t, r, stage, ranks*slice)
				checkAllReduce(t, k.DType, k.Op, srcs, got[r*slice:(r+1)*slice], count)
				for q := range ranks {
					if q != r {
						assert.Equal(t, srcs[q], got[q*slice:(q+1)*slice], "%s: slot %d as it landed", name, q)
					}
				}
			}
		}
	}
}
