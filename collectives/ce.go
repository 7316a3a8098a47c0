package collectives

import (
	"fmt"

	"github.com/nvls-go/nvls/cuda"
	"github.com/nvls-go/nvls/kernels"
)

// The copy-engine path (WithCopyEngineMin): in a team of 2 ranks on the
// unicast transport, a broadcast or all-gather of at least the limit moves
// its data with cuMemcpyDtoDAsync into the peer's buffer, between two
// barrier kernels, instead of the SMs' stores. On 2 x H200 the copy
// engines carried 395 GB/s a direction where the SMs' stores carried 368
// (docs/perf.md run 41). The start barrier makes sure every rank's recv is
// free; a rank arrives at the end barrier only after its copies, which
// stream order places before it, so a rank that leaves it finds the
// peer's data in its recv. The rank's own copy (out of place) runs beside
// the peer copy, on the side stream, forked from and joined back into the
// call's stream with events, which stream capture follows too.

// usesCE reports whether the Comm has the copy-engine path.
func (c *Comm) usesCE() bool {
	return c.flavor == kernels.Unicast && c.size == 2 && c.cfg.ceMin != 0
}

// ceCall reports whether call cl, of n bytes a rank sends, goes by copy
// engine: usesCE, a recv that is a team buffer at the same offset on
// every rank (the peer copy's destination), and n at least the limit.
func (c *Comm) ceCall(cl *call, n uint64) bool {
	return c.usesCE() && cl.recvZC && n >= c.cfg.ceMin
}

// ceRank enqueues a copy-engine collective on rank rs: the start barrier;
// n bytes from src into the peer's workspace at offset peerOff (n == 0:
// none) and, beside it, own = n bytes from src to ownDst where ownDst is
// not src; the end barrier.
func (c *Comm) ceRank(cl *call, rs *part, src cuda.DevicePtr, n, peerOff uint64, ownDst cuda.DevicePtr) error {
	if err := c.barrierRank(cl, rs); err != nil {
		return fmt.Errorf("the copy engines' start barrier: %w", err)
	}
	if n > 0 {
		own := ownDst != src
		if own {
			if err := c.d.EventRecord(rs.fork, rs.stream); err != nil {
				return fmt.Errorf("forking the rank's own copy: %w", err)
			}
			if err := c.d.StreamWaitEvent(rs.side, rs.fork); err != nil {
				return fmt.Errorf("forking the rank's own copy: %w", err)
			}
			if err := c.d.MemcpyDtoDAsync(ownDst, src, n, rs.side); err != nil {
				return fmt.Errorf("the rank's own copy: %w", err)
			}
			if err := c.d.EventRecord(rs.join, rs.side); err != nil {
				return fmt.Errorf("joining the rank's own copy: %w", err)
			}
		}
		peer := cuda.DevicePtr(rs.peer[1-rs.rank] + peerOff)
		if err := c.d.MemcpyDtoDAsync(peer, src, n, rs.stream); err != nil {
			return fmt.Errorf("the copy to the peer: %w", err)
		}
		if own {
			if err := c.d.StreamWaitEvent(rs.stream, rs.join); err != nil {
				return fmt.Errorf("joining the rank's own copy: %w", err)
			}
		}
		rs.launches++
	}
	if err := c.barrierRank(cl, rs); err != nil {
		return fmt.Errorf("the copy engines' end barrier: %w", err)
	}
	return nil
}
