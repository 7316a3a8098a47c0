package collectives

import (
	"context"
	"encoding/binary"
	"fmt"
	"sync"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/nvls-go/nvls/cuda"
	"github.com/nvls-go/nvls/cuda/sim"
	"github.com/nvls-go/nvls/internal/kabi"
	"github.com/nvls-go/nvls/simnode"
	"github.com/nvls-go/nvls/team"
)

// The gate: a test kernel that blocks its stream until the test opens the
// gate, so that a rank can be held back from a collective for as long as
// a test wants.
const (
	gateKernel = "collectives_test_gate"
	gatePTX    = ".version 8.0\n.target sm_90\n.address_size 64\n.visible .entry collectives_test_gate(.param .align 8 .b8 p[8])\n{\n\tret;\n}\n"
)

var gates struct {
	sync.Mutex
	m    map[uint64]chan struct{}
	next uint64
}

func init() { gates.m = map[uint64]chan struct{}{} }

// runGate is the gate kernel.
func runGate(l *sim.Launch) error {
	id := binary.LittleEndian.Uint64(l.Params)
	gates.Lock()
	ch := gates.m[id]
	gates.Unlock()
	<-ch
	return nil
}

// newSimNode is a simulated node that runs nvls's kernels and the gate.
func newSimNode(cfg sim.Config) *sim.Node {
	cfg.Kernels = map[string]sim.KernelFunc{gateKernel: runGate}
	return simnode.New(cfg)
}

// gate holds back local rank l's stream (after the work already on it)
// until the returned function is called (the test's cleanup calls it too).
func (f *fixture) gate(l int) (open func()) {
	f.tb.Helper()
	gates.Lock()
	gates.next++
	id := gates.next
	ch := make(chan struct{})
	gates.m[id] = ch
	gates.Unlock()
	var mod cuda.Module
	require.NoError(f.tb, onContext(f.node, f.t.Context(l), func() error {
		m, err := f.node.ModuleLoadData([]byte(gatePTX))
		if err != nil {
			return err
		}
		mod = m
		fn, err := f.node.ModuleGetFunction(m, gateKernel)
		if err != nil {
			return err
		}
		return f.node.LaunchKernel(fn, cuda.D1(1), cuda.D1(1), 0, f.streams[l], unsafe.Pointer(&id), 8)
	}))
	var once sync.Once
	open = func() {
		once.Do(func() {
			close(ch)
			require.NoError(f.tb, onContext(f.node, f.t.Context(l), func() error {
				if err := f.node.StreamSynchronize(f.streams[l]); err != nil {
					return err
				}
				return f.node.ModuleUnload(mod)
			}))
		})
	}
	f.tb.Cleanup(open)
	return open
}

// slot reads counter or epoch slot [phase][block] of local rank l.
func (f *fixture) slot(l int, base uint64, phase, block int) uint32 {
	off := base + uint64(phase*kabi.MaxBlocks+block)*4
	return binary.LittleEndian.Uint32(f.read(cuda.DevicePtr(f.c.ranks[l].own+off), 4))
}

// checkBarrierHolds: with local rank held back (its launches gated), a
// barrier followed by a memset on every rank's stream: no memset runs
// until the held rank is let go, then all do.
func checkBarrierHolds(t *testing.T, f *fixture, held int) {
	t.Helper()
	open := f.gate(held)
	require.NoError(t, f.c.Barrier(context.Background(), f.streams))
	require.NoError(t, f.t.Run(team.JobFunc(func(l int) error {
		return f.node.MemsetD32Async(f.foreign[l], 0xfeedf00d, 16, f.streams[l])
	})))
	time.Sleep(50 * time.Millisecond)
	for l := range f.n {
		assert.NotEqual(t, uint32(0xfeedf00d), binary.LittleEndian.Uint32(f.read(f.foreign[l], 4)),
			"rank %d passed the barrier while rank %d was held back", l, held)
	}
	open()
	f.sync()
	for l := range f.n {
		assert.Equal(t, uint32(0xfeedf00d), binary.LittleEndian.Uint32(f.read(f.foreign[l], 4)), "rank %d", l)
	}
}

// TestBarrierOrders: work after the barrier on a rank's stream waits until
// every rank has reached it, here until a held-back rank is let go.
func TestBarrierOrders(t *testing.T) {
	for _, tr := range transports() {
		t.Run(tr.String(), func(t *testing.T) {
			f := newFixture(t, fixtureConfig{ranks: 3, transport: tr, dataBytes: 8 << 20, foreign: 4096})
			// New met the ranks in one barrier (after zeroing the LL
			// area): start-barrier sequence 1 of block 0.
			require.Equal(t, uint32(1), f.slot(0, kabi.EpochOffset, 0, 0))
			checkBarrierHolds(t, f, 1)
			// Every barrier (New's and this one) moved the sequence along.
			for l := range 3 {
				assert.Equal(t, uint32(2), f.slot(l, kabi.EpochOffset, 0, 0))
			}
		})
	}
}

// TestEpochWrap: barrier counters, epochs and start-barrier sequences
// start just below 2^32 on every rank; barriers, all-reduces and
// broadcasts across the wrap stay in step and right.
func TestEpochWrap(t *testing.T) {
	for _, tr := range transports() {
		t.Run(tr.String(), func(t *testing.T) {
			const ranks = 4
			f := newMatrixFixture(t, ranks, tr)
			start := uint32(1<<32 - 2*ranks - 1)
			slots := make([]byte, kabi.Phases*kabi.MaxBlocks*4)
			for i := 0; i < len(slots); i += 4 {
				binary.LittleEndian.PutUint32(slots[i:], start)
			}
			noWords := make([]byte, 2*kabi.MaxBlocks*kabi.MaxRanks*8)
			for l := range ranks {
				f.write(cuda.DevicePtr(f.c.ranks[l].own+kabi.CounterOffset), slots)
				f.write(cuda.DevicePtr(f.c.ranks[l].own+kabi.EpochOffset), slots)
				// A sequence set back must not find the words it left.
				f.write(cuda.DevicePtr(f.c.ranks[l].own+kabi.ArriveOffset), noWords)
			}
			rng := newRNG(t)
			sendB, recvB := f.alloc(matrixMax+guardBytes), f.alloc(matrixMax+guardBytes)
			for i := range 4 {
				require.NoError(t, f.c.Barrier(context.Background(), f.streams))
				t.Run(fmt.Sprint("round ", i), func(t *testing.T) {
					runAllReduce(t, f, f.c, rng, f.ptrs(sendB), f.ptrs(recvB), F16, Sum, 1000)
					runBroadcast(t, f, f.c, rng, f.ptrs(sendB), f.ptrs(recvB), U32, 700, i%ranks)
				})
			}
			// Block 0: 4 barriers, 4 all-reduces (LL: block 0 still
			// arrives) and 4 broadcasts, each a start-barrier sequence,
			// which skips 0. Equal on every rank.
			wantSeq := start
			for range 12 {
				if wantSeq++; wantSeq == 0 {
					wantSeq = 2
				}
			}
			// At least the broadcasts' 4 end barriers (the multicast
			// all-reduce's too) crossed the wrap of counter [1][0].
			wantEnd := f.slot(0, kabi.EpochOffset, 1, 0)
			assert.Less(t, wantEnd, start, "the end barriers did not cross the wrap")
			assert.Zero(t, (wantEnd-start)%ranks)
			for l := range ranks {
				assert.Equal(t, wantSeq, f.slot(l, kabi.EpochOffset, 0, 0), "rank %d sequence", l)
				assert.Equal(t, wantEnd, f.slot(l, kabi.CounterOffset, 1, 0), "rank %d counter", l)
				assert.Equal(t, wantEnd, f.slot(l, kabi.EpochOffset, 1, 0), "rank %d epoch", l)
				assert.Equal(t, "ok", kabi.Status{Word: binary.LittleEndian.Uint64(f.read(cuda.DevicePtr(f.c.ranks[l].own), 8))}.String())
			}
		})
	}
}
