//go:build mpi

package mpi

import (
	"context"
	"fmt"
	"slices"
	"sync"
	"time"

	gompi "github.com/sbromberger/gompi"

	"github.com/nvls-go/nvls/internal/deadline"
	"github.com/nvls-go/nvls/team"
)

// Polling backoff of the receive loops.
const (
	pollMin = 10 * time.Microsecond
	pollMax = time.Millisecond
)

// rootMargin is how long before the deadline rank 0 stops gathering, to
// tell the ranks that arrived which ones did not: at most this, at most a
// quarter of the time left.
const rootMargin = 500 * time.Millisecond

// gather is one collective: every rank's data to every rank, through
// rank 0. The caller holds b.mu (or is New) and gave ctx a deadline.
func (b *Bootstrap) gather(ctx context.Context, op string, mine []byte) ([][]byte, error) {
	seq, err := b.begin(ctx, op)
	if err != nil {
		return nil, deadline.Explain(ctx, err)
	}
	tag := 1 + int(seq%maxTag)
	var out [][]byte
	if b.rank == 0 {
		out, err = b.root(ctx, op, seq, tag, mine)
	} else {
		out, err = b.leaf(ctx, op, seq, tag, mine)
	}
	if err != nil {
		err = deadline.Explain(ctx, err)
		b.broken = err
		return nil, err
	}
	return out, nil
}

func (b *Bootstrap) missing(op string, seq uint64, ranks []int, err error) error {
	return &team.MissingRanksError{Op: op, Seq: seq, Rank: b.rank, Missing: ranks, Err: err}
}

// root gathers every rank's contribution, then sends everyone the result,
// or, when ranks are missing or disagree on the collective, the reason.
func (b *Bootstrap) root(ctx context.Context, op string, seq uint64, tag int, mine []byte) ([][]byte, error) {
	deadline, _ := ctx.Deadline()
	margin := min(rootMargin, time.Until(deadline)/4)
	gctx, cancel := context.WithDeadline(ctx, deadline.Add(-margin))
	defer cancel()

	g, err := b.collect(gctx, op, seq, tag, mine)
	if err != nil {
		return nil, err
	}
	slices.Sort(g.arrived)
	if len(g.pending) > 0 || g.mismatch != "" {
		return nil, b.abort(ctx, gctx, op, seq, tag, g)
	}
	res := frame(kindResult, op, encodeParts(g.parts))
	if len(res) >= 1<<31-1 {
		return nil, fmt.Errorf("mpi: rank 0: %s #%d: %w: result of %d bytes", op, seq, ErrTooLarge, len(res))
	}
	if late := b.sendAll(deadline, tag, g.arrived, res); len(late) > 0 {
		return nil, b.missing(op, seq, late, fmt.Errorf("sending the result: %w", context.DeadlineExceeded))
	}
	return g.parts, nil
}

// gathered is what rank 0 has of one collective so far.
type gathered struct {
	parts    [][]byte // by rank; rank 0's own included
	pending  []int    // the ranks not heard from
	arrived  []int    // the ranks heard from
	mismatch string   // the first rank that called another collective
}

// collect receives the other ranks' contributions, polling with backoff,
// until all came or gctx ends.
func (b *Bootstrap) collect(gctx context.Context, op string, seq uint64, tag int, mine []byte) (*gathered, error) {
	g := &gathered{parts: make([][]byte, b.size), pending: make([]int, 0, b.size-1)}
	g.parts[0] = slices.Clone(mine)
	for r := 1; r < b.size; r++ {
		g.pending = append(g.pending, r)
	}
	wait := pollMin
	for len(g.pending) > 0 {
		got, err := b.poll(g, op, seq, tag)
		if err != nil {
			return nil, err
		}
		if got {
			wait = pollMin
			continue
		}
		if gctx.Err() != nil {
			break
		}
		sleep(gctx, wait)
		wait = min(2*wait, pollMax)
	}
	return g, nil
}

// poll receives, once round the pending ranks, what they have sent, and
// reports whether anything came.
func (b *Bootstrap) poll(g *gathered, op string, seq uint64, tag int) (bool, error) {
	got := false
	for i := 0; i < len(g.pending); {
		r := g.pending[i]
		msg, ok, err := b.tryRecv(r, tag)
		if err != nil {
			return got, fmt.Errorf("mpi: rank 0: %s #%d: from rank %d: %w", op, seq, r, err)
		}
		if !ok {
			i++
			continue
		}
		got = true
		kind, rop, payload, err := unframe(msg)
		if err == nil && kind == kindData && staleHello(rop, op) {
			continue // left by an earlier New that failed: wait for this one's
		}
		g.pending = slices.Delete(g.pending, i, i+1)
		g.arrived = append(g.arrived, r)
		switch {
		case err != nil:
			return got, fmt.Errorf("mpi: rank 0: %s #%d: from rank %d: %w", op, seq, r, err)
		case kind != kindData:
			return got, fmt.Errorf("mpi: rank 0: %s #%d: from rank %d: unexpected message kind %d", op, seq, r, kind)
		case rop != op && g.mismatch == "":
			g.mismatch = fmt.Sprintf("rank %d called %s where rank 0 called %s (collective #%d)", r, rop, op, seq)
		}
		g.parts[r] = payload
	}
	return got, nil
}

// abort tells the ranks that arrived why the collective failed (a rank
// called another collective, or ranks are missing at gctx's end) and
// returns that error.
func (b *Bootstrap) abort(ctx, gctx context.Context, op string, seq uint64, tag int, g *gathered) error {
	pending := g.pending
	var cause error
	if g.mismatch != "" {
		cause = fmt.Errorf("mpi: %s", g.mismatch)
		pending = nil
	} else {
		cause = gctx.Err()
		if ctx.Err() == nil {
			cause = context.DeadlineExceeded // rank 0 stopped early, on purpose
		}
	}
	deadline, _ := ctx.Deadline()
	notice := frame(kindFail, op, append(encodeRanks(pending), cause.Error()...))
	b.sendAll(deadline, tag, g.arrived, notice)
	if g.mismatch != "" {
		return fmt.Errorf("mpi: rank 0: %w", cause)
	}
	return b.missing(op, seq, pending, cause)
}

// leaf sends its contribution to rank 0 and waits for the answer.
func (b *Bootstrap) leaf(ctx context.Context, op string, seq uint64, tag int, mine []byte) ([][]byte, error) {
	deadline, _ := ctx.Deadline()
	msg := frame(kindData, op, mine)
	if len(msg) >= 1<<31-1 {
		return nil, fmt.Errorf("mpi: rank %d: %s #%d: %w: %d bytes", b.rank, op, seq, ErrTooLarge, len(mine))
	}
	if late := b.sendAll(deadline, tag, []int{0}, msg); len(late) > 0 {
		return nil, b.missing(op, seq, late, fmt.Errorf("sending to rank 0: %w", context.DeadlineExceeded))
	}
	wait := pollMin
	for {
		reply, ok, err := b.tryRecv(0, tag)
		if err != nil {
			return nil, fmt.Errorf("mpi: rank %d: %s #%d: from rank 0: %w", b.rank, op, seq, err)
		}
		if ok {
			if _, rop, _, err := unframe(reply); err == nil && staleHello(rop, op) {
				continue // rank 0's answer to an earlier New this rank gave up on
			}
			return b.answer(op, seq, reply)
		}
		if ctx.Err() != nil {
			return nil, b.missing(op, seq, []int{0}, fmt.Errorf("no answer from rank 0: %w", ctx.Err()))
		}
		sleep(ctx, wait)
		wait = min(2*wait, pollMax)
	}
}

// answer decodes rank 0's reply.
func (b *Bootstrap) answer(op string, seq uint64, reply []byte) ([][]byte, error) {
	kind, rop, payload, err := unframe(reply)
	if err != nil {
		return nil, fmt.Errorf("mpi: rank %d: %s #%d: from rank 0: %w", b.rank, op, seq, err)
	}
	switch kind {
	case kindResult:
		if rop != op {
			return nil, fmt.Errorf("mpi: rank %d called %s where rank 0 called %s (collective #%d)", b.rank, op, rop, seq)
		}
		parts, err := decodeParts(payload, b.size)
		if err != nil {
			return nil, fmt.Errorf("mpi: rank %d: %s #%d: %w", b.rank, op, seq, err)
		}
		return parts, nil
	case kindFail:
		ranks, reason, err := decodeRanks(payload)
		if err != nil {
			return nil, fmt.Errorf("mpi: rank %d: %s #%d: failure notice: %w", b.rank, op, seq, err)
		}
		if len(ranks) == 0 {
			return nil, fmt.Errorf("mpi: rank %d: %s #%d: rank 0 says: %s", b.rank, op, seq, reason)
		}
		if string(reason) == context.DeadlineExceeded.Error() {
			return nil, b.missing(op, seq, ranks, fmt.Errorf("rank 0 gave up waiting for them: %w", context.DeadlineExceeded))
		}
		return nil, b.missing(op, seq, ranks, fmt.Errorf("rank 0 gave up: %s: %w", reason, context.DeadlineExceeded))
	}
	return nil, fmt.Errorf("mpi: rank %d: %s #%d: unexpected message kind %d from rank 0", b.rank, op, seq, kind)
}

// tryRecv receives the message from src with tag if one is there.
func (b *Bootstrap) tryRecv(src, tag int) ([]byte, bool, error) {
	ok, st := b.comm.Iprobe(src, tag)
	if !ok {
		return nil, false, nil
	}
	n := st.GetCount(gompi.Byte)
	if n <= 0 {
		return nil, true, fmt.Errorf("mpi: probed message of %d bytes", n)
	}
	msg, err := recvGuarded(b.comm, src, tag, n)
	return msg, true, err
}

// recvGuarded receives n bytes into a buffer with guard bytes on both
// sides, and checks the guards afterwards.
func recvGuarded(c *gompi.Communicator, src, tag, n int) ([]byte, error) {
	buf := make([]byte, n+2*guard)
	fillGuard(buf[:guard], 0xA5)
	fillGuard(buf[guard+n:], 0x5A)
	c.RecvPreallocBytes(buf[guard:guard+n], src, tag)
	if !checkGuard(buf[:guard], 0xA5) || !checkGuard(buf[guard+n:], 0x5A) {
		return nil, fmt.Errorf("%w: %d-byte receive from rank %d", ErrOverrun, n, src)
	}
	return buf[guard : guard+n : guard+n], nil
}

func fillGuard(b []byte, seed byte) {
	for i := range b {
		b[i] = seed ^ byte(i*29)
	}
}

func checkGuard(b []byte, seed byte) bool {
	for i := range b {
		if b[i] != seed^byte(i*29) {
			return false
		}
	}
	return true
}

// sendAll sends msg to every rank in to, in parallel, and returns the
// ranks whose send had not completed by the deadline. Those sends stay
// blocked in MPI_Send on their goroutines (see the package documentation).
func (b *Bootstrap) sendAll(deadline time.Time, tag int, to []int, msg []byte) []int {
	if len(to) == 0 {
		return nil
	}
	var mu sync.Mutex
	done := make([]bool, len(to))
	all := make(chan struct{})
	var wg sync.WaitGroup
	for i, r := range to {
		wg.Go(func() {
			b.comm.SendBytes(msg, r, tag)
			mu.Lock()
			done[i] = true
			mu.Unlock()
		})
	}
	go func() {
		wg.Wait()
		close(all)
	}()
	t := time.NewTimer(max(time.Until(deadline), 0))
	defer t.Stop()
	select {
	case <-all:
		return nil
	case <-t.C:
	}
	mu.Lock()
	defer mu.Unlock()
	var late []int
	for i, r := range to {
		if !done[i] {
			late = append(late, r)
		}
	}
	return late
}

// sleep waits d or until ctx ends.
func sleep(ctx context.Context, d time.Duration) {
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
	case <-ctx.Done():
	}
}
