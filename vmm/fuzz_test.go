package vmm_test

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/nvls-go/nvls/cuda"
	"github.com/nvls-go/nvls/cuda/sim"
	"github.com/nvls-go/nvls/vmm"
)

// FuzzGrowable runs a fuzzed sequence of operations on a Growable over a
// simulated node and checks, after each, the invariants (Len <= Mapped <=
// Cap, whole chunks, Ptr moves only with Generation), the length against
// a model, that the bytes written at the start survive, and at the end
// that nothing leaks.
//
// The input is read two bytes at a time, op then arg; the first byte
// chooses one allocation per chunk or per grow (Coalesce):
//
//	op%6 == 0, 1: Grow by arg * 8 KiB + op
//	op%6 == 2:    Shrink by arg * 8 KiB (by Len+1 when arg is 255: refused)
//	op%6 == 3:    occupy the range right after the reservation (so the
//	              next extension has to move)
//	op%6 == 4:    make the (arg%12+1)th driver call of the next op fail
//	op%6 == 5:    Grow to past the reservation
func FuzzGrowable(f *testing.F) {
	f.Add([]byte{0, 0, 40, 0, 255, 2, 16, 5, 0, 2, 255})
	f.Add([]byte{1, 0, 100, 5, 0, 3, 0, 5, 0, 2, 50, 0, 200})
	f.Add([]byte{0, 0, 8, 3, 0, 4, 3, 5, 0, 4, 7, 5, 0, 2, 255, 0, 1})
	f.Fuzz(func(t *testing.T, in []byte) {
		if len(in) == 0 {
			return
		}
		const quantum = 8 << 10
		coalesce := in[0]%2 == 1
		n := sim.New(sim.Config{Devices: 2, AllocGranularityMin: 64 << 10, AllocGranularityRecommended: 64 << 10})
		defer n.Close()
		require.NoError(t, n.Init())
		g, err := vmm.NewGrowable(n, 0, vmm.GrowableOptions{Device: 1, Access: []cuda.Device{0, 1}, Reserve: 256 << 10, Coalesce: coalesce})
		require.NoError(t, err)
		var blockers []*vmm.Reservation
		var head []byte // what the first bytes must hold
		model := uint64(0)
		in = in[1:]
		for k := 0; k+1 < len(in) && k < 128; k += 2 {
			op, arg := in[k]%6, uint64(in[k+1])
			ptr, gen := g.Ptr(), g.Generation()
			var err error
			switch op {
			case 0, 1, 5:
				by := arg*quantum + uint64(op)
				if op == 5 {
					by = g.Cap() - g.Len() + 1
				}
				if g.Len()+by > 64<<20 {
					continue
				}
				err = g.Grow(by)
				if err == nil {
					model += by
				}
			case 2:
				by := arg * quantum
				if arg == 255 {
					by = g.Len() + 1
				}
				err = g.Shrink(by)
				switch {
				case by > model:
					require.ErrorIs(t, err, vmm.ErrOutOfRange)
				case err == nil:
					model -= by
				default: // an injected fault part-way: some chunks went
					require.GreaterOrEqual(t, g.Len(), model-by)
					require.LessOrEqual(t, g.Len(), model)
					model = g.Len()
				}
			case 3:
				n.ClearFaults()
				end := g.Ptr() + cuda.DevicePtr(g.Cap())
				r, err := vmm.Reserve(n, 64<<10, 0, end)
				require.NoError(t, err)
				blockers = append(blockers, r)
			case 4:
				n.FailNth(int(arg%12)+1, cuda.ErrorUnknown)
				continue
			}
			n.ClearFaults()
			if err != nil && !errors.Is(err, vmm.ErrOutOfRange) {
				var ce *cuda.Error
				require.True(t, errors.As(err, &ce), "only injected faults fail: %v", err)
			}
			checkInvariants(t, g)
			require.Equal(t, model, g.Len())
			if !coalesce {
				require.Equal(t, vmm.RoundUp(g.Len(), g.Chunk()), g.Mapped())
			}
			if g.Generation() == gen {
				require.Equal(t, ptr, g.Ptr(), "the base moves only with the generation")
			} else {
				require.Equal(t, gen+1, g.Generation())
			}
			if uint64(len(head)) > g.Len() {
				head = head[:g.Len()]
			}
			if len(head) > 0 {
				got, err := n.ReadDevice(g.Ptr(), len(head))
				require.NoError(t, err)
				require.Equal(t, head, got)
			}
			if len(head) < 64 && g.Len() >= 64 {
				head = randBytes(64)
				require.NoError(t, n.WriteDevice(g.Ptr(), head))
			}
		}
		n.ClearFaults()
		require.NoError(t, g.Close())
		for _, b := range blockers {
			require.NoError(t, b.Close())
		}
		require.NoError(t, n.CheckNoLeaks())
	})
}
