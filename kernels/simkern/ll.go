package simkern

import (
	"github.com/nvls-go/nvls/cuda"
	"github.com/nvls-go/nvls/internal/kabi"
	"github.com/nvls-go/nvls/kernels"
)

// The LL kernels (nvls.h: ll_collective), one block. The protocol, per rank
// r of n, payload P = count*elem_bytes bytes per source, L = ceil(P/8)
// lines:
//
//   - e = (the epoch at LLOffset) + 1, skipping 0 (to 2, so that the parity
//     still alternates across the wrap); parity = e & 1.
//   - push: for every line i the block owns (grid-stride over lines, a
//     function of count and grid only), the 8 payload bytes at 8*i (the
//     tail zero-padded) go as {d0, e, d1, e} to line [parity][r][i] of
//     every rank's LL area (params.ll_area, params.ll_lines lines per
//     parity and source): of send, or, reduce-scatter, of slice q of send
//     for rank q.
//   - pull: for each of those lines, for s = 0..n-1, poll the own line
//     [parity][s][i] until both flags are e (deadline: record the timeout,
//     phase 0); all-gather: write source s's valid bytes to recv + s*P;
//     the others: reduce in rank order and write the valid bytes to recv
//     (reduce: on the root only).
//   - one block: it stores e as the epoch at its end. More: each block
//     counts itself at entry, once it has read the epoch (atomic add on
//     the counter at LLOffset+4); the block that counted last resets the
//     counter and stores e at its end.
//
// Reduce with FlagLLTwo, in two steps: slice q (lines q*L1 .. q*L1+L1-1 of
// L, L1 = ceil(L/n), clipped to L) goes to rank q's line [parity][r][j],
// which reduces it as the reduce-scatter does; every rank but the root
// then pushes its reduced lines to the root's [parity][r][L1+j], and the
// root writes its own slice and copies the others' to recv.
//
// Here a block's lines go in chunks of the block size (the lines of one
// grid-stride iteration are contiguous): one store per chunk and rank,
// one load per chunk and source rank; a chunk is accepted when every line
// in it carries e twice, so the check is per line, as on the GPU.

// llEpoch is the epoch of the LL kernel that starts after one that
// finished with epoch prev.
func llEpoch(prev uint32) uint32 {
	e := prev + 1
	if e == 0 {
		e = 2
	}
	return e
}

// llCall is one LL launch on one rank, as every block sees it.
type llCall struct {
	kind           kernels.Coll
	payload, lines uint64
	epoch          uint32
	parity         uint64
	two            bool   // FlagLLTwo: the reduce in two steps
	l1             uint64 // lines a slice (two steps), else lines
	send, recv     uint64 // absolute addresses
	buf            []byte // one block iteration of lines
}

// line is the workspace offset of line i from rank src in this call's
// parity. The layout uses the area's capacity (params.ll_lines per parity
// and source), not this call's line count: a slot's place must not depend
// on the call's size, else a fast rank's next call, with the other parity
// and another size, could overwrite lines a slow rank has yet to read.
func (k *kern) line(c *llCall, src, i uint64) uint64 {
	n, capLines := uint64(k.p.NRanks), uint64(k.p.LLLines)
	return k.p.LLArea + ((c.parity*n+src)*capLines+i)*kabi.LLLineBytes
}

func (k *kern) ll() error {
	c, counted, ok, err := k.llStart()
	if !ok || err != nil {
		return err
	}
	if err := k.llPush(&c); err != nil {
		return err
	}
	if err := k.llArrive(); err != nil {
		return err
	}
	if err := k.llPull(&c); err != nil {
		return err
	}
	return k.llPublish(&c, counted)
}

// llStart begins an LL launch's block: the team check at entry (false:
// the team failed, nothing to do), the call as this block sees it, its
// epoch, and with more than one block this block's count (the counter's
// value before its add).
func (k *kern) llStart() (c llCall, counted uint32, ok bool, err error) {
	if ok, err := k.enter(); !ok || err != nil {
		return c, 0, false, err
	}
	p := &k.p
	c = llCall{kind: k.s.k.Coll, payload: p.Bytes(), send: k.own + p.Send, recv: k.own + p.Recv}
	c.lines = (c.payload + kabi.LLLinePayload - 1) / kabi.LLLinePayload
	c.two, c.l1 = c.kind == kernels.CollReduce && p.Flags&kabi.FlagLLTwo != 0, c.lines
	if c.two {
		c.l1 = (c.lines + uint64(p.NRanks) - 1) / uint64(p.NRanks)
	}
	if p.Flags&kabi.FlagAbsPtrs != 0 {
		c.send, c.recv = p.Send, p.Recv
	}
	prev, err := k.mem.LoadU32(cuda.DevicePtr(k.own + kabi.LLOffset))
	if err != nil {
		return c, 0, false, err
	}
	c.epoch = llEpoch(prev)
	c.parity = uint64(c.epoch & 1)
	if k.grid > 1 {
		if counted, err = k.mem.AtomicAddU32(cuda.DevicePtr(k.own+kabi.LLOffset+4), 1); err != nil {
			return c, 0, false, err
		}
	}
	c.buf = make([]byte, k.bdim*kabi.LLLineBytes)
	return c, counted, true, nil
}

// llArrive stores block 0's start-barrier arrival word (nvls.h:
// ll_collective), for a rank that runs a barrier kernel in this call.
func (k *kern) llArrive() error {
	if k.block != 0 {
		return nil
	}
	eslot := cuda.DevicePtr(k.own + kabi.EpochOffset)
	prev, err := k.mem.LoadU32(eslot)
	if err != nil {
		return err
	}
	seq := nextSeq(prev)
	if err := k.arrive(arriveSlots(seq, 0), uint64(seq&0xff)<<56|k.callWord(), true); err != nil {
		return err
	}
	var w [4]byte
	le.PutUint32(w[:], seq)
	return k.mem.Store(eslot, w[:])
}

// llPublish ends an LL launch's block: one block publishes the epoch; of
// more, the one that counted last, resetting the counter.
func (k *kern) llPublish(c *llCall, counted uint32) error {
	own := cuda.DevicePtr(k.own)
	var w [8]byte
	le.PutUint32(w[0:], c.epoch)
	switch {
	case k.grid == 1:
		return k.mem.Store(own+kabi.LLOffset, w[:4])
	case uint64(counted) == k.grid-1:
		return k.mem.Store(own+kabi.LLOffset, w[:])
	}
	return nil
}

// llBroadcast is the LL broadcast (kabi.FlagLL on the broadcast; nvls.h:
// ll_broadcast): the root stores its lines into slot [parity][root] of
// every other rank's area (out of place, also its bytes into its own
// recv); every other rank stores one line, line 0 of its own slot with no
// payload, into every other rank's area, then polls its slot-root lines
// and writes their bytes to recv; block 0 of every rank waits for the one
// line of every rank but the root and itself, so that every rank hears
// from every rank in every call, as the parities need.
//
// With FlagLLTwo, in two steps: S = NRanks-1 slices of L1 = ceil(L/S)
// lines, slice q owned by rank (root+1+q) mod NRanks; the root stores line
// q*L1+j into the owner's slot-root line j; the owner writes it to recv
// and stores it on to every rank but the root and itself at line 1+j of
// its own slot, and takes line j of the other slices from there.
func (k *kern) llBroadcast() error {
	c, counted, ok, err := k.llStart()
	if !ok || err != nil {
		return err
	}
	p := &k.p
	n, root := uint64(p.NRanks), uint64(p.Root)
	two := p.Flags&kabi.FlagLLTwo != 0 && n > 1
	slices := uint64(1)
	if two {
		slices = n - 1
	}
	l1 := (c.lines + slices - 1) / slices
	sliceOf := func(r uint64) uint64 { return (r + n - root - 1) % n } // the slice of rank r (two steps)
	// span is where chunk j (m lines) of rank r's slice is in the lines:
	// its first line and how many there are (0 past the end).
	span := func(r, j, m uint64) (g, mr uint64) {
		if !two {
			return j, m
		}
		g = sliceOf(r)*l1 + j
		if g >= c.lines {
			return g, 0
		}
		return g, min(m, c.lines-g)
	}
	bytesOf := func(g, m uint64) (lo, hi uint64) {
		return g * kabi.LLLinePayload, min((g+m)*kabi.LLLinePayload, c.payload)
	}
	data := make([]byte, k.bdim*kabi.LLLinePayload)
	if uint32(root) == p.Rank {
		err = k.chunks(0, l1, func(j, m uint64) error {
			for r := range n {
				if r == root {
					continue
				}
				g, mr := span(r, j, m)
				if mr == 0 {
					continue
				}
				lo, hi := bytesOf(g, mr)
				b := c.buf[:mr*kabi.LLLineBytes]
				if err := k.llLines(c.send+lo, data[:mr*kabi.LLLinePayload], hi-lo, b, c.epoch, k.llCheck()); err != nil {
					return err
				}
				if err := k.mem.Store(cuda.DevicePtr(p.UC[r]+k.line(&c, root, j)), b); err != nil {
					return err
				}
				if c.send != c.recv && (two || r == (root+1)%n) {
					if err := k.mem.Store(cuda.DevicePtr(c.recv+lo), data[:hi-lo]); err != nil {
						return err
					}
				}
			}
			return nil
		})
	} else if k.block == 0 {
		b := make([]byte, kabi.LLLineBytes)
		llEncode(make([]byte, kabi.LLLinePayload), b, c.epoch, k.llCheck())
		for r := range n {
			if r == uint64(p.Rank) {
				continue
			}
			if err = k.mem.Store(cuda.DevicePtr(p.UC[r]+k.line(&c, uint64(p.Rank), 0)), b); err != nil {
				break
			}
		}
	}
	if err != nil {
		return err
	}
	if err := k.llArrive(); err != nil {
		return err
	}
	stopped := false
	// take polls mr lines of source s at line i of its slot and writes
	// their bytes to recv at line g; it returns the lines as polled.
	take := func(s, i, g, mr uint64) ([]byte, error) {
		b := c.buf[:mr*kabi.LLLineBytes]
		ok, err := k.llPoll(&c, s, i, b)
		if !ok || err != nil {
			stopped = true
			return nil, err
		}
		d := data[:mr*kabi.LLLinePayload]
		for x := range mr {
			le.PutUint32(d[8*x:], le.Uint32(b[16*x:]))
			le.PutUint32(d[8*x+4:], le.Uint32(b[16*x+8:]))
		}
		lo, hi := bytesOf(g, mr)
		return b, k.mem.Store(cuda.DevicePtr(c.recv+lo), d[:hi-lo])
	}
	if uint32(root) != p.Rank {
		me := uint64(p.Rank)
		err = k.chunks(0, l1, func(j, m uint64) error {
			if stopped {
				return nil
			}
			if g, mr := span(me, j, m); mr > 0 {
				b, err := take(root, j, g, mr)
				if stopped || err != nil {
					return err
				}
				for r := range n {
					if !two || r == root || r == me {
						continue
					}
					if err := k.mem.Store(cuda.DevicePtr(p.UC[r]+k.line(&c, me, 1+j)), b); err != nil {
						return err
					}
				}
			}
			for s := range n {
				if !two || s == root || s == me {
					continue
				}
				if g, mr := span(s, j, m); mr > 0 {
					if _, err := take(s, 1+j, g, mr); stopped || err != nil {
						return err
					}
				}
			}
			return nil
		})
		if err != nil {
			return err
		}
	}
	if k.block == 0 && !stopped {
		b := c.buf[:kabi.LLLineBytes]
		for s := range n {
			if s == root || s == uint64(p.Rank) {
				continue
			}
			if ok, err := k.llPoll(&c, s, 0, b); !ok || err != nil {
				if err != nil {
					return err
				}
				break
			}
		}
	}
	return k.llPublish(&c, counted)
}

// llPush stores the block's lines of send, flagged with the epoch, into
// slot [parity][rank] of every rank's LL area (two steps: slice r's lines
// to rank r).
func (k *kern) llPush(c *llCall) error {
	p := &k.p
	data := make([]byte, k.bdim*kabi.LLLinePayload)
	return k.chunks(0, c.l1, func(i, m uint64) error {
		for r := range uint64(p.NRanks) {
			g, mr := i, m // the chunk's first line of send, and its lines
			if c.two {
				g, mr = c.slice(r, i, m)
				if mr == 0 {
					continue
				}
			}
			lo, hi := g*kabi.LLLinePayload, min((g+mr)*kabi.LLLinePayload, c.payload)
			b := c.buf[:mr*kabi.LLLineBytes]
			if r == 0 || c.two || c.kind == kernels.CollReduceScatter {
				src := c.send + lo
				if c.kind == kernels.CollReduceScatter {
					src += r * c.payload
				}
				if err := k.llLines(src, data[:mr*kabi.LLLinePayload], hi-lo, b, c.epoch, k.llCheck()); err != nil {
					return err
				}
			}
			if err := k.mem.Store(cuda.DevicePtr(p.UC[r]+k.line(c, uint64(p.Rank), i)), b); err != nil {
				return err
			}
		}
		return nil
	})
}

// slice is where chunk i (m lines) of slice q is in the lines of send
// (two steps): its first line g and how many of its lines there are (0
// past the end).
func (c *llCall) slice(q, i, m uint64) (g, n uint64) {
	g = q*c.l1 + i
	if g >= c.lines {
		return g, 0
	}
	return g, min(m, c.lines-g)
}

// llCheck is the call's check as the LL lines carry it.
func (k *kern) llCheck() uint32 { return kabi.LLCheck(k.p.Check, k.callCount()) }

// llLines makes the lines b of the n payload bytes at src (zero-padded in
// d to whole lines), flagged with epoch e and e ^ check.
func (k *kern) llLines(src uint64, d []byte, n uint64, b []byte, e, check uint32) error {
	clear(d)
	if err := k.mem.Load(cuda.DevicePtr(src), d[:n]); err != nil {
		return err
	}
	llEncode(d, b, e, check)
	return nil
}

// llEncode makes the lines b of the payload d (whole lines), flagged with
// epoch e and e ^ check.
func llEncode(d, b []byte, e, check uint32) {
	for j := range len(d) / kabi.LLLinePayload {
		le.PutUint32(b[16*j:], le.Uint32(d[8*j:]))
		le.PutUint32(b[16*j+4:], e)
		le.PutUint32(b[16*j+8:], le.Uint32(d[8*j+4:]))
		le.PutUint32(b[16*j+12:], e^check)
	}
}

// llFailedCheckEvery: the LL poll looks at the team-failed word every so
// many polls (nvls.h checks it with the deadline, every 1024 polls of a
// GPU thread; a poll here is a whole chunk, and far slower).
const llFailedCheckEvery = 64

// llPoll polls line chunk i of source s (into b) until every line carries
// the epoch: true then; false (recorded) on the deadline (a timeout, phase
// 0) or a failed team (an abort, phase 0).
func (k *kern) llPoll(c *llCall, s, i uint64, b []byte) (bool, error) {
	other := 0
	for spin := 0; ; spin++ {
		if err := k.mem.Load(cuda.DevicePtr(k.own+k.line(c, s, i)), b); err != nil {
			return false, err
		}
		ready, theirs, odd := llReady(b, c.epoch, k.llCheck())
		if ready {
			return true, nil
		}
		if odd {
			if other++; other == llMismatchPolls {
				// Rank s called with other arguments (nvls.h: ll_wait).
				words := make([]uint64, k.p.NRanks)
				words[k.p.Rank] = llWord(k.llCheck())
				words[s] = llWord(theirs)
				return false, k.recordMismatch(words)
			}
		}
		if k.mem.GlobalTimer() > k.deadline {
			return false, k.recordTimeout(0)
		}
		if spin%llFailedCheckEvery == llFailedCheckEvery-1 {
			if failed, err := k.checkFailed(0); failed || err != nil {
				return false, err
			}
		}
		backoff(spin)
	}
}

// llPull polls the own area until every rank's lines of the block carry
// the epoch, then copies each source's lines to its slot of recv
// (all-gather) or reduces them in rank order into recv (on the root only,
// for reduce; two steps: the own slice, pushed to the root by the others,
// and on the root the others' slices copied to recv); on the deadline it
// records the timeout (phase 0), on a failed team that it gave up (phase
// 0), and stops.
func (k *kern) llPull(c *llCall) error {
	p := &k.p
	n := uint64(p.NRanks)
	stopped := false
	srcs := make([][]byte, n)
	for s := range srcs {
		srcs[s] = make([]byte, k.bdim*kabi.LLLinePayload)
	}
	out := make([]byte, k.bdim*kabi.LLLinePayload)
	// poll waits for m lines of source s at line i of its slot and leaves
	// their payload in srcs[s].
	poll := func(s, i, m uint64) ([]byte, bool, error) {
		b := c.buf[:m*kabi.LLLineBytes]
		if ok, err := k.llPoll(c, s, i, b); !ok || err != nil {
			stopped = true
			return nil, false, err
		}
		d := srcs[s][:m*kabi.LLLinePayload]
		for j := range m {
			le.PutUint32(d[8*j:], le.Uint32(b[16*j:]))
			le.PutUint32(d[8*j+4:], le.Uint32(b[16*j+8:]))
		}
		return d, true, nil
	}
	return k.chunks(0, c.l1, func(i, m uint64) error {
		if stopped {
			return nil
		}
		g, mo := i, m
		if c.two {
			g, mo = c.slice(uint64(p.Rank), i, m)
		}
		if mo > 0 {
			lo, hi := g*kabi.LLLinePayload, min((g+mo)*kabi.LLLinePayload, c.payload)
			valid := make([][]byte, n)
			for s := range n {
				d, ok, err := poll(s, i, mo)
				if !ok {
					return err
				}
				valid[s] = d[:hi-lo]
				if c.kind == kernels.CollAllGather {
					if err := k.mem.Store(cuda.DevicePtr(c.recv+s*c.payload+lo), valid[s]); err != nil {
						return err
					}
				}
			}
			switch {
			case c.kind == kernels.CollAllGather || (c.kind == kernels.CollReduce && !c.two && p.Rank != p.Root):
			case c.two && p.Rank != p.Root:
				// Step two: the reduced lines to the root's slot, past L1.
				d := out[:mo*kabi.LLLinePayload]
				clear(d)
				k.sc.reduce(k.dt, k.op, d[:hi-lo], valid)
				b := c.buf[:mo*kabi.LLLineBytes]
				llEncode(d, b, c.epoch, k.llCheck())
				if err := k.mem.Store(cuda.DevicePtr(p.UC[p.Root]+k.line(c, uint64(p.Rank), c.l1+i)), b); err != nil {
					return err
				}
			default:
				k.sc.reduce(k.dt, k.op, out[:hi-lo], valid)
				if err := k.mem.Store(cuda.DevicePtr(c.recv+lo), out[:hi-lo]); err != nil {
					return err
				}
			}
		}
		if !c.two || p.Rank != p.Root {
			return nil
		}
		// Step two on the root: the other ranks' reduced slices.
		for s := range n {
			gs, ms := c.slice(s, i, m)
			if s == uint64(p.Root) || ms == 0 {
				continue
			}
			d, ok, err := poll(s, c.l1+i, ms)
			if !ok {
				return err
			}
			lo, hi := gs*kabi.LLLinePayload, min((gs+ms)*kabi.LLLinePayload, c.payload)
			if err := k.mem.Store(cuda.DevicePtr(c.recv+lo), d[:hi-lo]); err != nil {
				return err
			}
		}
		return nil
	})
}

// llMismatchPolls: a line that carries this call's epoch with another
// check for so many polls is from a rank with other arguments
// (nvls.h: ll_wait, 64).
const llMismatchPolls = 64

// llReady reports whether every 16-byte line in b carries e and e ^ check
// in its flag words; odd, when not, whether a line carries e with another
// check (theirs).
func llReady(b []byte, e, check uint32) (ready bool, theirs uint32, odd bool) {
	ready = true
	for j := 0; j < len(b); j += kabi.LLLineBytes {
		f0, f1 := le.Uint32(b[j+4:]), le.Uint32(b[j+12:])
		if f0 == e && f1 == e^check {
			continue
		}
		ready = false
		if f0 == e && !odd {
			theirs, odd = f1^e, true
		}
	}
	return ready, theirs, odd
}

// llWord is an LL check as a recorded arrival word (nvls.h: ll_wait): the
// check's arguments in bits 40-50, its 21-bit count below, no sequence.
func llWord(check uint32) uint64 {
	const countBits = 21
	return uint64(check>>countBits)<<40 | uint64(check&(1<<countBits-1))
}
