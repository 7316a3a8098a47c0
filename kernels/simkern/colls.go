package simkern

import (
	"github.com/nvls-go/nvls/cuda"
	"github.com/nvls-go/nvls/internal/kabi"
	"github.com/nvls-go/nvls/kernels"
)

// The one-pass kernels of reducescatter.cu, allgather.cu, reduce.cu and
// broadcast.cu, on the spans of nvls.h (reduce_span, copy_span), one block.

// reduceSpan is reduce_span: the n elements at workspace offset src,
// reduced over every rank, to address dst (any alignment): the vectors
// from where src is 16-byte aligned, grid-stride; the head before and the
// tail after in block 0, through the unicast leaves.
func (k *kern) reduceSpan(src, dst, n uint64) error {
	e := uint64(k.dt.Size())
	per := kabi.VecBytes / e
	head := min(n, (kabi.VecBytes-src%kabi.VecBytes)%kabi.VecBytes/e)
	nvec := (n - head) / per
	tail := n - head - nvec*per
	body := head * e
	err := k.chunks(0, nvec, func(v, m uint64) error {
		off := body + v*kabi.VecBytes
		data, err := k.loadReduce(src+off, m*kabi.VecBytes)
		if err != nil {
			return err
		}
		return k.mem.Store(cuda.DevicePtr(dst+off), data)
	})
	if err != nil || k.block != 0 {
		return err
	}
	for t := range head + tail {
		off := t * e
		if t >= head {
			off = body + nvec*kabi.VecBytes + (t-head)*e
		}
		x, err := k.loadReduce1(src + off)
		if err != nil {
			return err
		}
		if err := k.mem.Store(cuda.DevicePtr(dst+off), x); err != nil {
			return err
		}
	}
	return nil
}

// copySpan is copy_span: the n bytes at address src (any alignment) to
// workspace offset dst of every rank (storeAll: multimem.st, or a store to
// each rank): the vectors from where dst is 16-byte aligned, grid-stride;
// the head and tail bytes in block 0, to each rank's UC alias.
func (k *kern) copySpan(src, dst, n uint64) error {
	head := min(n, (kabi.VecBytes-dst%kabi.VecBytes)%kabi.VecBytes)
	nvec := (n - head) / kabi.VecBytes
	tail := n - head - nvec*kabi.VecBytes
	buf := make([]byte, k.bdim*kabi.VecBytes)
	err := k.chunks(0, nvec, func(v, m uint64) error {
		off := head + v*kabi.VecBytes
		b := buf[:m*kabi.VecBytes]
		if err := k.mem.Load(cuda.DevicePtr(src+off), b); err != nil {
			return err
		}
		return k.storeAll(dst+off, b)
	})
	if err != nil || k.block != 0 {
		return err
	}
	for _, part := range [][2]uint64{{0, head}, {head + nvec*kabi.VecBytes, tail}} {
		off, m := part[0], part[1]
		if m == 0 {
			continue
		}
		b := make([]byte, m)
		if err := k.mem.Load(cuda.DevicePtr(src+off), b); err != nil {
			return err
		}
		for r := range k.p.NRanks {
			if err := k.mem.Store(cuda.DevicePtr(k.p.UC[r]+dst+off), b); err != nil {
				return err
			}
		}
	}
	return nil
}

// between runs body between the start and end barriers (barrier phases 0
// and 1); a timed-out barrier ends the block (the status word says so).
func (k *kern) between(body func() error) error {
	if ok, err := k.barrier(0); !ok || err != nil {
		return err
	}
	if err := body(); err != nil {
		return err
	}
	_, err := k.barrier(1)
	return err
}

// recvAddr is the address of params.recv: absolute with FlagAbsRecv, else
// an offset of rank r's workspace.
func (k *kern) recvAddr(r uint32) uint64 {
	if k.p.Flags&kabi.FlagAbsRecv != 0 {
		return k.p.Recv
	}
	return k.p.UC[r] + k.p.Recv
}

// reduceScatter: rank r reduces slice r of every rank's send into its recv.
func (k *kern) reduceScatter() error {
	if k.s.isLL() {
		return k.ll()
	}
	p := &k.p
	if k.local() {
		return k.localReduce()
	}
	return k.between(func() error {
		return k.reduceSpan(p.Send+uint64(p.Rank)*p.Bytes(), k.recvAddr(p.Rank), p.Count)
	})
}

// local reports whether the launch is a FlagLocal path in the unicast
// flavor (the multicast flavor ignores the flag): reducescatter.cu's
// one-shot, or reduce.cu's one-shot on the root.
func (k *kern) local() bool {
	c := k.s.k.Coll
	oneShot := c == kernels.CollReduceScatter && !k.s.isLL() || c == kernels.CollReduce && k.s.k.Algo == kernels.OneShot
	return oneShot && k.p.Flags&kabi.FlagLocal != 0 && !k.mc
}

// localReduce is the FlagLocal path: count elements reduced from this
// rank's own memory, source r (r != rank) at localSource(r), the own at
// send, through per-source bases as the kernel's q.uc; nvls_enter, no
// barrier; with FlagPieces, piece by piece as their flags arrive.
func (k *kern) localReduce() error {
	if ok, err := k.enter(); !ok || err != nil {
		return err
	}
	p := &k.p
	// reduce reads source r through a base of its own (nvls.h's q.uc[r]):
	// the bases swap in for the reduction only, so that a timeout or an
	// abort on the way still reaches the peers' words through p.UC.
	reduce := func(send, recv, n uint64) error {
		saved := p.UC
		defer func() { p.UC = saved }()
		for r := uint32(0); r < p.NRanks; r++ {
			if r != p.Rank {
				p.UC[r] = k.own + k.localSource(r) - p.Send
			}
		}
		return k.reduceSpan(send, recv, n)
	}
	if p.Flags&kabi.FlagPieces == 0 {
		return reduce(p.Send, k.recvAddr(p.Rank), p.Count)
	}
	// FlagPieces: piece i once every other rank's flag word for it equals
	// the own start-barrier sequence word (nvls.h's ce_piece_ready).
	seq, err := k.mem.LoadU32(cuda.DevicePtr(k.own + kabi.EpochOffset))
	if err != nil {
		return err
	}
	e, per := uint64(p.ElemBytes), kabi.VecBytes/uint64(p.ElemBytes)
	for i := range kabi.CEPieces {
		for q := range int(p.NRanks) {
			if q == int(p.Rank) {
				continue
			}
			if ok, err := k.waitWord(1, k.own+kabi.CEFlag(i, q), seq, true); !ok || err != nil {
				return err
			}
		}
		lo, hi := kabi.CEPieceStart(i, p.Count, per), kabi.CEPieceStart(i+1, p.Count, per)
		if err := reduce(p.Send+lo*e, k.recvAddr(p.Rank)+lo*e, hi-lo); err != nil {
			return err
		}
	}
	return nil
}

// localSource is the workspace offset of source r on the FlagLocal path:
// the reduce-scatter's stage + r x stride (call_count / nranks elements,
// count where call_count is 0), the reduce's stage + w x localChunk, w
// being r's index among the ranks other than the root (packed).
func (k *kern) localSource(r uint32) uint64 {
	p := &k.p
	if k.s.k.Coll == kernels.CollReduce {
		w := uint64(r)
		if r > p.Rank {
			w--
		}
		return p.Stage + w*k.localChunk()
	}
	return p.Stage + uint64(r)*k.localStride()
}

// localChunk is the reduce's FlagLocal slot: count elements in whole
// 16-byte vectors.
func (k *kern) localChunk() uint64 {
	return (k.p.Bytes() + kabi.VecBytes - 1) / kabi.VecBytes * kabi.VecBytes
}

// localStride is the reduce-scatter's FlagLocal distance between two
// sources in bytes: call_count / nranks elements (count where call_count
// is 0).
func (k *kern) localStride() uint64 {
	p := &k.p
	n := p.Count
	if p.CallCount != 0 {
		n = p.CallCount / uint64(p.NRanks)
	}
	return n * uint64(p.ElemBytes)
}

// allGather: rank r stores its send into slot r of every rank's recv.
func (k *kern) allGather() error {
	if k.s.isLL() {
		return k.ll()
	}
	p := &k.p
	send := k.own + p.Send
	if p.Flags&kabi.FlagAbsSend != 0 {
		send = p.Send
	}
	return k.between(func() error {
		return k.copySpan(send, p.Recv+uint64(p.Rank)*p.Bytes(), p.Bytes())
	})
}

// reduce: one-shot (the root reduces everything), two-shot (the ranks
// other than the root each reduce a slice of the vectors into the root's
// workspace; with one rank, the root its own) or LL.
func (k *kern) reduce() error {
	p := &k.p
	switch k.s.k.Algo {
	case kernels.LL:
		return k.ll()
	case kernels.OneShot:
		if k.local() {
			return k.localReduce()
		}
		return k.between(func() error {
			if p.Rank != p.Root {
				return nil
			}
			return k.reduceSpan(p.Send, k.recvAddr(p.Root), p.Count)
		})
	}
	if k.pushReduceLaunch() {
		return k.pushReduce()
	}
	per := kabi.VecBytes / uint64(k.dt.Size())
	workers, w := uint64(p.NRanks), uint64(p.Rank)
	if p.NRanks > 1 && p.Flags&kabi.FlagRootSlice == 0 {
		if p.Rank == p.Root {
			return k.between(func() error { return nil })
		}
		workers--
		if p.Rank > p.Root {
			w--
		}
	}
	slice := p.Count / per / workers
	lo := w * slice * kabi.VecBytes
	n := slice * per
	if w == workers-1 {
		n = p.Count - w*slice*per
	}
	return k.between(func() error { return k.reduceSpan(p.Send+lo, k.recvAddr(p.Root)+lo, n) })
}

// broadcast: the root copies its send to every rank's recv; in the
// unicast flavor with FlagSliced and more than one rank the root's send is
// cut into nranks-1 slices of whole vectors (the last one the rest), and
// the rank j+1 after the root copies slice j through the root's UC alias
// to every rank, the root included, whose blocks copy nothing; it reads
// where the root's send is from the slot of RootSendOffset that the
// root's block stored into every other rank before the start barrier.
// With FlagRootSlice too there are nranks slices, slice j the rank j
// after the root's, the root's slice 0 from its own send.
func (k *kern) broadcast() error {
	p := &k.p
	if p.Flags&kabi.FlagLL != 0 {
		return k.llBroadcast()
	}
	if !k.mc && p.Flags&kabi.FlagPush != 0 && p.NRanks > 2 {
		return k.between(func() error {
			if p.Rank == p.Root {
				return k.pushRoot()
			}
			return k.pushForward()
		})
	}
	sliced := !k.mc && p.Flags&kabi.FlagSliced != 0 && p.NRanks > 1
	slot := kabi.RootSendOffset + k.block*8
	if sliced && p.Rank == p.Root {
		var b [8]byte
		le.PutUint64(b[:], p.Send)
		for r := uint32(0); r < p.NRanks; r++ {
			if r == p.Root {
				continue
			}
			if err := k.mem.Store(cuda.DevicePtr(p.UC[r]+slot), b[:]); err != nil {
				return err
			}
		}
	}
	return k.between(func() error {
		all := p.Flags&kabi.FlagRootSlice != 0 // the root takes slice 0
		switch {
		case sliced && (all || p.Rank != p.Root):
			send := p.Send
			if p.Rank != p.Root {
				var b [8]byte
				if err := k.mem.Load(cuda.DevicePtr(k.own+slot), b[:]); err != nil {
					return err
				}
				send = le.Uint64(b[:])
			}
			slices, skip := uint64(p.NRanks-1), uint32(1)
			if all {
				slices, skip = uint64(p.NRanks), 0
			}
			j := uint64((p.Rank + p.NRanks - p.Root - skip) % p.NRanks)
			slice := p.Bytes() / kabi.VecBytes / slices * kabi.VecBytes
			lo := j * slice
			n := slice
			if j == slices-1 {
				n = p.Bytes() - lo
			}
			return k.copySpan(p.UC[p.Root]+send+lo, p.Recv+lo, n)
		case !sliced && p.Rank == p.Root:
			return k.copySpan(k.own+p.Send, p.Recv, p.Bytes())
		}
		return nil
	})
}

// pushSlice: vectors [lo, lo+n) of the root's send make slice j of the
// push broadcast (broadcast.cu: push_slice).
func (k *kern) pushSlice(nvec, j uint64) (lo, n uint64) {
	slices := uint64(k.p.NRanks - 1)
	per := nvec / slices
	lo = j * per
	n = per
	if j == slices-1 {
		n = nvec - lo
	}
	return lo, n
}

// pushRoot is the root's part of the push broadcast (FlagPush;
// broadcast.cu: push_root): round k of block b stores piece k*grid+b of
// every slice into its rank's recv (and the own recv, out of place), then
// k+1 into that rank's push flag b; block 0 stores the bytes after the
// last whole vector into every rank.
func (k *kern) pushRoot() error {
	p := &k.p
	nvec := p.Bytes() / kabi.VecBytes
	piece := k.bdim * kabi.PushVecs
	src := k.own + p.Send
	self := p.Send != p.Recv
	var flag [4]byte
	for r := uint64(0); ; r++ {
		q := r*k.grid + k.block
		any := false
		for j := uint64(0); j < uint64(p.NRanks-1); j++ {
			lo, n := k.pushSlice(nvec, j)
			if q*piece >= n {
				continue
			}
			any = true
			to := (p.Root + 1 + uint32(j)) % p.NRanks
			a, b := lo+q*piece, lo+min((q+1)*piece, n)
			buf := make([]byte, (b-a)*kabi.VecBytes)
			if err := k.mem.Load(cuda.DevicePtr(src+a*kabi.VecBytes), buf); err != nil {
				return err
			}
			if err := k.mem.Store(cuda.DevicePtr(p.UC[to]+p.Recv+a*kabi.VecBytes), buf); err != nil {
				return err
			}
			if self {
				if err := k.mem.Store(cuda.DevicePtr(k.own+p.Recv+a*kabi.VecBytes), buf); err != nil {
					return err
				}
			}
		}
		if !any {
			break
		}
		le.PutUint32(flag[:], uint32(r+1))
		for j := uint64(0); j < uint64(p.NRanks-1); j++ {
			if _, n := k.pushSlice(nvec, j); q*piece >= n {
				continue
			}
			to := (p.Root + 1 + uint32(j)) % p.NRanks
			if err := k.mem.Store(cuda.DevicePtr(p.UC[to]+kabi.PushFlagOffset+k.block*4), flag[:]); err != nil {
				return err
			}
		}
	}
	tail := p.Bytes() - nvec*kabi.VecBytes
	if k.block != 0 || tail == 0 {
		return nil
	}
	off := nvec * kabi.VecBytes
	b := make([]byte, tail)
	if err := k.mem.Load(cuda.DevicePtr(src+off), b); err != nil {
		return err
	}
	for r := uint32(0); r < p.NRanks; r++ {
		if r == p.Rank && !self {
			continue
		}
		if err := k.mem.Store(cuda.DevicePtr(p.UC[r]+p.Recv+off), b); err != nil {
			return err
		}
	}
	return nil
}

// pushForward is the part of the rank j+1 after the root (broadcast.cu:
// push_forward): round k of block b waits for its flag to reach k+1, then
// stores piece k*grid+b of slice j from its own recv into every rank's
// but the root's and its own; after the last round the flag goes back to
// 0. A wait that gives up ends the rounds (the status word says why).
func (k *kern) pushForward() error {
	p := &k.p
	nvec := p.Bytes() / kabi.VecBytes
	piece := k.bdim * kabi.PushVecs
	j := uint64((p.Rank + p.NRanks - p.Root - 1) % p.NRanks)
	lo, n := k.pushSlice(nvec, j)
	flag := cuda.DevicePtr(k.own + kabi.PushFlagOffset + k.block*4)
	for r := uint64(0); ; r++ {
		q := r*k.grid + k.block
		if q*piece >= n {
			break
		}
		ok, err := k.pushWait(flag, uint32(r+1))
		if err != nil {
			return err
		}
		if !ok {
			break
		}
		a, b := lo+q*piece, lo+min((q+1)*piece, n)
		buf := make([]byte, (b-a)*kabi.VecBytes)
		if err := k.mem.Load(cuda.DevicePtr(k.own+p.Recv+a*kabi.VecBytes), buf); err != nil {
			return err
		}
		for to := uint32(0); to < p.NRanks; to++ {
			if to == p.Root || to == p.Rank {
				continue
			}
			if err := k.mem.Store(cuda.DevicePtr(p.UC[to]+p.Recv+a*kabi.VecBytes), buf); err != nil {
				return err
			}
		}
	}
	return k.mem.Store(flag, make([]byte, 4))
}

// pushWait polls the push flag until target (broadcast.cu: push_wait);
// false (recorded, phase PhasePush) on the deadline or a failed team.
func (k *kern) pushWait(flag cuda.DevicePtr, target uint32) (bool, error) {
	for spin := 1; ; spin++ {
		got, err := k.mem.LoadU32(flag)
		if err != nil {
			return false, err
		}
		if got >= target {
			return true, nil
		}
		if k.mem.GlobalTimer() > k.deadline {
			return false, k.recordTimeout(kabi.PhasePush)
		}
		if spin%failedCheckEvery == 0 {
			if failed, err := k.checkFailed(kabi.PhasePush); failed || err != nil {
				return false, err
			}
		}
		backoff(spin)
	}
}

// pushReduce is the push reduce, a ring (FlagPush on the two-shot
// reduce of a 4- or 8-byte type, reduce.cu: reduce_push): block b zeroes
// its own ready and credit words, then, between the barriers, round k of
// the rank at position pos of the chain root + 1, ..., root adds its own
// piece k*grid+b to its predecessor's partial sum in slot [b][k mod
// PushDepth] of its FIFO (none at position 0) and stores the sum into the
// same slot of its successor's FIFO (once the successor credited round
// k-PushDepth) and k+1 into the successor's ready word [rank][b], or, on
// the root, into its recv; where round k+PushDepth follows it stores k+1
// into its credit word of the predecessor. Block 0 of the root reduces
// the elements after the last whole vector.
func (k *kern) pushReduce() error {
	p := &k.p
	zero := make([]byte, 4)
	for s := uint64(0); s < kabi.MaxRanks; s++ {
		for _, w := range []uint64{k.pushReady(p.Rank, s), k.pushCredit(p.Rank, s)} {
			if err := k.mem.Store(cuda.DevicePtr(w), zero); err != nil {
				return err
			}
		}
	}
	return k.between(func() error {
		ok, err := k.pushRounds()
		if err != nil || !ok || p.Rank != p.Root || k.block != 0 {
			return err
		}
		e := uint64(k.dt.Size())
		per := kabi.VecBytes / e
		for i := p.Count / per * per; i < p.Count; i++ {
			x, err := k.loadReduce1(p.Send + i*e)
			if err != nil {
				return err
			}
			if err := k.mem.Store(cuda.DevicePtr(p.UC[p.Root]+p.Recv+i*e), x); err != nil {
				return err
			}
		}
		return nil
	})
}

// pushReady and pushCredit are the addresses of the push reduce's flag
// words [s][block] in rank r's stage.
func (k *kern) pushReady(r uint32, s uint64) uint64 {
	return k.p.UC[r] + k.p.Stage + (s*kabi.MaxBlocks+k.block)*4
}

func (k *kern) pushCredit(r uint32, s uint64) uint64 {
	return k.p.UC[r] + k.p.Stage + ((kabi.MaxRanks+s)*kabi.MaxBlocks+k.block)*4
}

// pushSlot is the address of FIFO slot [block][round mod PushDepth] in
// rank r's stage.
func (k *kern) pushSlot(r uint32, round uint64) uint64 {
	piece := k.bdim * kabi.RingVecs * kabi.RingChunks * kabi.VecBytes
	return k.p.UC[r] + k.p.Stage + kabi.PushFlagsBytes + (k.block*kabi.PushDepth+round%kabi.PushDepth)*piece
}

// pushRounds runs the push reduce's rounds (the ring) of block k.block;
// false when a wait gave up (the status word says why).
func (k *kern) pushRounds() (bool, error) {
	p := &k.p
	n, me := uint64(p.NRanks), uint64(p.Rank)
	nvec := p.Count / (kabi.VecBytes / uint64(k.dt.Size()))
	piece := k.bdim * kabi.RingVecs * kabi.RingChunks
	pos := (me + n - uint64(p.Root) - 1) % n
	prev, next := uint32((me+n-1)%n), uint32((me+1)%n)
	var flag [4]byte
	for r := uint64(0); ; r++ {
		a := (r*k.grid + k.block) * piece
		if a >= nvec {
			return true, nil
		}
		nb := (min(a+piece, nvec) - a) * kabi.VecBytes
		le.PutUint32(flag[:], uint32(r+1))
		if pos > 0 {
			if ok, err := k.pushWait(cuda.DevicePtr(k.pushReady(p.Rank, uint64(prev))), uint32(r+1)); !ok || err != nil {
				return false, err
			}
		}
		if pos < n-1 && r >= kabi.PushDepth {
			if ok, err := k.pushWait(cuda.DevicePtr(k.pushCredit(p.Rank, uint64(next))), uint32(r-kabi.PushDepth+1)); !ok || err != nil {
				return false, err
			}
		}
		out := make([]byte, nb)
		if err := k.mem.Load(cuda.DevicePtr(k.own+p.Send+a*kabi.VecBytes), out); err != nil {
			return false, err
		}
		if pos > 0 { // the predecessors' sum first, then the own piece
			part := make([]byte, nb)
			if err := k.mem.Load(cuda.DevicePtr(k.pushSlot(p.Rank, r)), part); err != nil {
				return false, err
			}
			own := out
			out = make([]byte, nb)
			k.sc.reduce(k.dt, k.op, out, [][]byte{part, own})
		}
		dst, ready := k.pushSlot(next, r), k.pushReady(next, me)
		if pos == n-1 {
			dst = p.UC[p.Root] + p.Recv + a*kabi.VecBytes
		}
		if err := k.mem.Store(cuda.DevicePtr(dst), out); err != nil {
			return false, err
		}
		if pos < n-1 {
			if err := k.mem.Store(cuda.DevicePtr(ready), flag[:]); err != nil {
				return false, err
			}
		}
		if pos > 0 && ((r+kabi.PushDepth)*k.grid+k.block)*piece < nvec {
			if err := k.mem.Store(cuda.DevicePtr(k.pushCredit(prev, me)), flag[:]); err != nil {
				return false, err
			}
		}
	}
}
