package main

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"runtime"
	"sync"
	"unsafe"

	"github.com/nvls-go/nvls/cuda"
	"github.com/nvls-go/nvls/kernels"
)

// chunkElems is how many elements the check moves between host and device
// at a time (per rank), so that checking 4 GiB needs little host memory.
const chunkElems = 1 << 22

// checkResult is one checked run.
type checkResult struct {
	wrongPerRank []int64
	maxErr       float64 // largest |got - ref| among elements within tolerance (floats)
}

func (c checkResult) wrong() int64 {
	var s int64
	for _, w := range c.wrongPerRank {
		s += w
	}
	return s
}

// reference is the expected output for a range of elements.
type reference struct {
	exact bool
	skip  bool      // nothing to check (expectation.skip)
	bits  []uint64  // exact expected bit pattern (integers, min/max, broadcast)
	val   []float64 // expected value (float sums)
	tol   []float64 // allowed |got - val| (float sums)
}

// verify runs op once through rn on fresh random data and counts, on every
// rank, the output elements that differ from a host reference:
//
//   - inputs: element i of rank r is value(dtype, seed, r, i), a fresh seed
//     per call; outputs are first poisoned (NaN for floats, 0xA5 bytes
//     for integers) so that an element never written is wrong;
//   - the reference is the collective's want (colls.go): all-reduce sums,
//     min or max over the ranks, computed on the host in float64 (exact
//     for these inputs) for floats and in wrapping integer arithmetic for
//     integers. Float sums may differ from it by the rounding of the type:
//     |got - ref| <= n*u*sum|x| + n*tiny, u the type's unit roundoff (2^-24
//     float, 2^-11 half, 2^-8 bfloat16), which bounds any summation order
//     with rounding at every step; min, max and integers must be exact;
//     broadcast: every rank's output equals the root's input bit for bit.
func verify(ctx context.Context, n *node, rn runner, op opSpec, inPlace bool, send, recv []cuda.DevicePtr) (checkResult, error) {
	// Under mpirun every rank must compute every rank's inputs: rank 0's seed.
	seed, err := n.sharedSeed(ctx, rand.Uint64())
	if err != nil {
		return checkResult{}, err
	}
	// In place, send is where the input goes (the collective's in-place
	// pointers, colls.go).
	if err := fillInputs(n, op, seed, send, recv, inPlace); err != nil {
		return checkResult{}, err
	}
	if err := rn.enqueue(ctx, op, send, recv, 1); err != nil {
		return checkResult{}, err
	}
	if err := n.drain(ctx, "checked run"); err != nil {
		return checkResult{}, err
	}
	res, err := compareOutputs(n, op, seed, recv)
	if err != nil {
		return res, err
	}
	// Every rank's count and the largest error.
	err = n.gatherCheck(ctx, &res)
	return res, err
}

// fillInputs uploads every local rank's input (and, out of place, poisons
// its output), on its own stream.
func fillInputs(n *node, op opSpec, seed uint64, in, recv []cuda.DevicePtr, inPlace bool) error {
	t := op.dtype
	count, outCount := op.coll.counts(op, n.ranks())
	return n.parallel(func(r int) error {
		buf := make([]byte, min(count, chunkElems)*uint64(t.Size()))
		for off := uint64(0); off < count; off += chunkElems {
			k := min(chunkElems, count-off)
			parallelFor(int(k), workersPerRank(n.size()), func(lo, hi int) {
				for i := lo; i < hi; i++ {
					bits, _ := value(t, seed, n.rank(r), off+uint64(i))
					t.PutBits(buf, i, bits)
				}
			})
			// On the rank's own (non-blocking) stream, which the legacy
			// stream of the synchronous copies would not order against;
			// synchronized before the host buffer is reused.
			if err := n.drv.MemcpyHtoDAsync(in[r]+cuda.DevicePtr(off*uint64(t.Size())), unsafe.Pointer(&buf[0]), k*uint64(t.Size()), n.streams[r]); err != nil {
				return fmt.Errorf("rank %d: uploading inputs: %w", n.rank(r), err)
			}
			if err := n.drv.StreamSynchronize(n.streams[r]); err != nil {
				return fmt.Errorf("rank %d: uploading inputs: %w", n.rank(r), err)
			}
		}
		if inPlace {
			return nil
		}
		// Stream-ordered before the collective.
		if err := n.drv.MemsetD8Async(recv[r], poison(t), outCount*uint64(t.Size()), n.streams[r]); err != nil {
			return fmt.Errorf("rank %d: poisoning outputs: %w", n.rank(r), err)
		}
		return nil
	})
}

// compareOutputs downloads every local rank's output chunk by chunk and
// counts the elements that differ from the reference (the rank's own
// where it differs from rank to rank; none on a reduce's other ranks).
func compareOutputs(n *node, op opSpec, seed uint64, recv []cuda.DevicePtr) (checkResult, error) {
	t := op.dtype
	_, count := op.coll.counts(op, n.ranks())
	res := checkResult{wrongPerRank: make([]int64, n.size())}
	refs := make([]reference, n.size())
	bufs := make([][]byte, n.size())
	errMax := make([]float64, n.size())
	for off := uint64(0); off < count; off += chunkElems {
		k := int(min(chunkElems, count-off))
		for r := range refs {
			if r == 0 || op.coll.perRank {
				computeReference(&refs[r], op, n.ranks(), n.rank(r), seed, off, k)
			}
		}
		err := n.parallel(func(r int) error {
			ref := &refs[0]
			if op.coll.perRank {
				ref = &refs[r]
			}
			if ref.skip {
				return nil
			}
			if bufs[r] == nil {
				bufs[r] = make([]byte, min(count, chunkElems)*uint64(t.Size()))
			}
			b := bufs[r][:k*t.Size()]
			if err := n.drv.MemcpyDtoHAsync(unsafe.Pointer(&b[0]), recv[r]+cuda.DevicePtr(off*uint64(t.Size())), uint64(len(b)), n.streams[r]); err != nil {
				return fmt.Errorf("rank %d: downloading outputs: %w", n.rank(r), err)
			}
			if err := n.drv.StreamSynchronize(n.streams[r]); err != nil {
				return fmt.Errorf("rank %d: downloading outputs: %w", n.rank(r), err)
			}
			var mu sync.Mutex
			parallelFor(k, workersPerRank(n.size()), func(lo, hi int) {
				w, e := compareRange(t, ref, b, lo, hi)
				mu.Lock()
				res.wrongPerRank[r] += w
				errMax[r] = math.Max(errMax[r], e)
				mu.Unlock()
			})
			return nil
		})
		if err != nil {
			return res, err
		}
	}
	for _, e := range errMax {
		res.maxErr = math.Max(res.maxErr, e)
	}
	return res, nil
}

// expectation is a collective's expected output on one rank: element i's
// bit pattern (exact) or value and tolerance (float sums); skip: the rank
// has no output to check (a reduce's other ranks).
type expectation struct {
	exact, skip bool
	elem        func(i uint64) (bits uint64, val, tol float64)
}

// allReduceWant: float sums within the rounding bound, everything else
// (integer sums that wrap as the device's do, min, max) exact.
func allReduceWant(op opSpec, ranks, _ int, seed uint64) expectation {
	t := op.dtype
	if t.Kind() != kernels.Float || op.op != kernels.Sum {
		return expectation{exact: true, elem: func(i uint64) (uint64, float64, float64) {
			return reduceExact(t, op.op, seed, ranks, i), 0, 0
		}}
	}
	return expectation{elem: func(i uint64) (uint64, float64, float64) {
		var s, a float64
		for r := range ranks {
			_, v := value(t, seed, r, i)
			s += v
			a += math.Abs(v)
		}
		return 0, s, float64(ranks) * (t.UnitRoundoff()*a + t.Tiny())
	}}
}

// broadcastWant: the root's input, bit for bit.
func broadcastWant(op opSpec, _, _ int, seed uint64) expectation {
	return expectation{exact: true, elem: func(i uint64) (uint64, float64, float64) {
		bits, _ := value(op.dtype, seed, op.root, i)
		return bits, 0, 0
	}}
}

// reduceScatterWant: rank's slice of the all-reduce of every rank's send.
func reduceScatterWant(op opSpec, ranks, rank int, seed uint64) expectation {
	e := allReduceWant(op, ranks, rank, seed)
	off := uint64(rank) * op.count
	return expectation{exact: e.exact, elem: func(i uint64) (uint64, float64, float64) { return e.elem(off + i) }}
}

// allGatherWant: every rank's input in rank order, bit for bit.
func allGatherWant(op opSpec, _, _ int, seed uint64) expectation {
	return expectation{exact: true, elem: func(i uint64) (uint64, float64, float64) {
		bits, _ := value(op.dtype, seed, int(i/op.count), i%op.count)
		return bits, 0, 0
	}}
}

// reduceWant: the all-reduce on the root; nothing on the other ranks.
func reduceWant(op opSpec, ranks, rank int, seed uint64) expectation {
	if rank != op.root {
		return expectation{skip: true}
	}
	return allReduceWant(op, ranks, rank, seed)
}

// computeReference fills ref for elements [off, off+k) of rank's output,
// in parallel.
func computeReference(ref *reference, op opSpec, ranks, rank int, seed, off uint64, k int) {
	e := op.coll.want(op, ranks, rank, seed)
	ref.exact, ref.skip = e.exact, e.skip
	if e.skip {
		return
	}
	ref.bits, ref.val, ref.tol = ref.bits[:0], ref.val[:0], ref.tol[:0]
	if e.exact {
		ref.bits = append(ref.bits, make([]uint64, k)...)
	} else {
		ref.val = append(ref.val, make([]float64, k)...)
		ref.tol = append(ref.tol, make([]float64, k)...)
	}
	parallelFor(k, runtime.GOMAXPROCS(0), func(lo, hi int) {
		for j := lo; j < hi; j++ {
			bits, val, tol := e.elem(off + uint64(j))
			if e.exact {
				ref.bits[j] = bits
			} else {
				ref.val[j], ref.tol[j] = val, tol
			}
		}
	})
}

// workersPerRank shares the host's cores among the ranks' goroutines.
func workersPerRank(ranks int) int { return max(1, runtime.GOMAXPROCS(0)/max(1, ranks)) }

// parallelFor runs fn over [0, k) split into at most workers ranges
// (ranges of fewer than 64K elements are not worth a goroutine).
func parallelFor(k, workers int, fn func(lo, hi int)) {
	workers = max(1, min(workers, k/(64<<10)))
	if workers == 1 {
		fn(0, k)
		return
	}
	per := (k + workers - 1) / workers
	var wg sync.WaitGroup
	for lo := 0; lo < k; lo += per {
		wg.Add(1)
		go func() {
			defer wg.Done()
			fn(lo, min(k, lo+per))
		}()
	}
	wg.Wait()
}

// reduceExact is the exact all-reduce of element i: integer sums wrap as
// the device's do; min and max pick one of the inputs.
func reduceExact(t kernels.DType, op kernels.RedOp, seed uint64, ranks int, i uint64) uint64 {
	var best uint64
	var bestV float64
	var sum uint64
	for r := range ranks {
		bits, v := value(t, seed, r, i)
		if r == 0 || (op == kernels.Min && v < bestV) || (op == kernels.Max && v > bestV) {
			best, bestV = bits, v
		}
		sum += bits
	}
	if op != kernels.Sum {
		return best
	}
	switch t.Size() {
	case 4:
		return uint64(uint32(sum)) // two's complement: int32 sums wrap the same way
	case 2:
		return uint64(uint16(sum))
	}
	return sum
}

// compareChunk counts the elements of got (k of them) that differ from
// ref, and returns the largest error among floats within tolerance.
func compareChunk(t kernels.DType, ref *reference, got []byte, k int) (wrong int64, maxErr float64) {
	return compareRange(t, ref, got, 0, k)
}

// compareRange is compareChunk over elements [lo, hi).
func compareRange(t kernels.DType, ref *reference, got []byte, lo, hi int) (wrong int64, maxErr float64) {
	mask := uint64(1)<<(8*t.Size()) - 1
	if t.Size() == 8 {
		mask = math.MaxUint64
	}
	if ref.exact {
		for j := lo; j < hi; j++ {
			bits, _ := get(t, got, j)
			if bits&mask != ref.bits[j]&mask {
				wrong++
			}
		}
		return wrong, 0
	}
	for j := lo; j < hi; j++ {
		_, v := get(t, got, j)
		d := math.Abs(v - ref.val[j])
		if !(d <= ref.tol[j]) { // NaN (poison) fails too
			wrong++
			continue
		}
		maxErr = math.Max(maxErr, d)
	}
	return wrong, maxErr
}
