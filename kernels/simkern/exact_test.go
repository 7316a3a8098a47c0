package simkern

import (
	"fmt"
	"testing"

	"github.com/nvls-go/nvls/internal/kabi"
	"github.com/nvls-go/nvls/kernels"
	"github.com/nvls-go/nvls/kernels/internal/kref"
)

var floatTypes = []kernels.DType{kernels.F32, kernels.F16, kernels.BF16}

// checkExact reports the elements of got that differ from kref.Exact.
func checkExact(t *testing.T, dt kernels.DType, op kernels.RedOp, ins [][]byte, got []byte, count int) {
	t.Helper()
	checkWith(t, kref.CheckExact, dt, op, ins, got, count)
}

// TestRankOrder pins the order of float sums: the unicast kernels reduce
// in rank order 0..n-1 in f32 and round once (nvls.h: uc_load_reduce), so
// every rank gets the same bits, and so must the simulator. The inputs
// (kref.Cancelling) make nearly every element's sum depend on the order;
// the result must be kref.Exact's, bit for bit, and differ from the
// reversed order's.
func TestRankOrder(t *testing.T) {
	rng, seed := kref.NewRNG()
	t.Logf("seed %d", seed)
	for _, ranks := range []int{3, 4, 8} {
		w := newWorkspace(t, ranks, kernels.Unicast)
		for _, dt := range floatTypes {
			for _, algo := range kernels.Algos {
				for _, sc := range kref.SizeCases {
					t.Run(fmt.Sprintf("%d-ranks/%v/%v/%s", ranks, algo, dt, sc.Name), func(t *testing.T) {
						count := sc.Count(kabi.VecBytes/dt.Size(), ranks)
						ins := kref.Cancelling(rng, dt, ranks, count)
						fwd := kref.Exact(dt, kernels.Sum, ins, count)
						rev := kref.Exact(dt, kernels.Sum, kref.Reversed(ins), count)
						if n := kref.Differing(dt, fwd, rev, count); n == 0 {
							t.Fatalf("no element of %d depends on the order: the test would not see a reversed order", count)
						}
						checkExact(t, dt, kernels.Sum, ins, runAllReduceOn(t, w, algo, dt, kernels.Sum, sc, ins), count)
					})
				}
			}
		}
	}
}

// TestSpecialValues checks every kernel of both flavors, on inputs full of
// NaN, ±0, ±Inf, subnormals and integer extremes (kref.Special), against
// the exact oracle: IEEE f32 sums in rank order rounded once, PTX
// min_num/max_num (a NaN operand yields the other, -0 < +0), wrapping
// integers. The multicast flavor is held to the same rules (the PTX ISA
// leaves multimem.ld_reduce's order and special-value rules open; this is
// the simulator's model).
func TestSpecialValues(t *testing.T) {
	rng, seed := kref.NewRNG()
	t.Logf("seed %d", seed)
	for _, ranks := range []int{2, 3, 8} {
		for _, f := range []kernels.Flavor{kernels.Unicast, kernels.Multicast} {
			w := newWorkspace(t, ranks, f)
			for _, dt := range kernels.DTypes {
				for _, op := range kernels.RedOps {
					if !kernels.Supported(f, dt, op) {
						continue
					}
					for _, algo := range kernels.Algos {
						for _, sc := range []kref.SizeCase{kref.SizeCases[1], kref.SizeCases[4]} { // tail, blocks
							t.Run(fmt.Sprintf("%d-ranks/%v/%v/%v_%v/%s", ranks, f, algo, dt, op, sc.Name), func(t *testing.T) {
								count := sc.Count(kabi.VecBytes/dt.Size(), ranks)
								ins := kref.Special(rng, dt, ranks, count)
								checkExact(t, dt, op, ins, runAllReduceOn(t, w, algo, dt, op, sc, ins), count)
							})
						}
					}
				}
			}
		}
	}
}
