package team

import (
	"context"
	"fmt"
	"slices"
	"sync"

	"github.com/nvls-go/nvls/internal/posixfd"
)

// NewInProcess returns the bootstraps of an n-rank team whose ranks are
// goroutines of this process, indexed by rank. Each is used by one
// goroutine. Handles can be shared by value between them (InProcess is
// true). When a collective cannot complete (a rank's context expires, or a
// rank closes its bootstrap), every rank waiting in it, and every later
// collective of any rank, fails with an error naming the ranks that did not
// arrive: the group is broken from then on.
func NewInProcess(n int) []Bootstrap {
	if n <= 0 {
		return nil
	}
	g := &group{n: n, rounds: map[uint64]*round{}, closed: make([]bool, n)}
	out := make([]Bootstrap, n)
	for r := range out {
		out[r] = &member{g: g, rank: r}
	}
	return out
}

type group struct {
	n      int
	mu     sync.Mutex
	rounds map[uint64]*round
	broken error
	closed []bool
}

type round struct {
	op        string
	seq       uint64
	arrived   []bool
	count     int
	data      [][]byte
	fds       []int
	out       [][]int // per receiver: its own copies of the FDs
	done      chan struct{}
	err       error
	collected int
}

type member struct {
	g      *group
	rank   int
	seq    uint64
	closed bool
}

var _ Bootstrap = (*member)(nil)

func (m *member) Rank() int       { return m.rank }
func (m *member) Size() int       { return m.g.n }
func (m *member) InProcess() bool { return true }

// breakLocked fails every round not yet complete with err, and every later
// collective. g.mu is held.
func (g *group) breakLocked(err error) {
	if g.broken == nil {
		g.broken = err
	}
	for seq, r := range g.rounds {
		select {
		case <-r.done:
			continue
		default:
		}
		r.err = g.broken
		close(r.done)
		delete(g.rounds, seq)
	}
}

// completeLocked finishes a round every rank arrived at: for AllGatherFDs
// it makes every receiver's copies while every sender is still inside the
// call (so its FD is still open).
func (g *group) completeLocked(r *round) {
	if r.op == "AllGatherFDs" {
		r.out = make([][]int, g.n)
		for i := range r.out {
			r.out[i] = make([]int, g.n)
			for j, fd := range r.fds {
				if fd < 0 {
					r.out[i][j] = -1
					continue
				}
				c, err := posixfd.DupCloexec(fd)
				if err != nil {
					for _, row := range r.out[:i+1] {
						closeAll(row)
					}
					r.out = nil
					r.err = fmt.Errorf("team: bootstrap: AllGatherFDs #%d: dup fd %d of rank %d: %w", r.seq, fd, j, err)
					close(r.done)
					return
				}
				r.out[i][j] = c
			}
		}
	}
	close(r.done)
}

func closeAll(fds []int) {
	for i, fd := range fds {
		closeFD(fd)
		fds[i] = -1
	}
}

// collective is one rank's part in one collective: it returns the round
// once complete, and the index of this rank's results in it.
func (m *member) collective(ctx context.Context, op string, data []byte, fd int) (*round, error) {
	g := m.g
	if m.closed {
		return nil, tagged(ErrBootstrapClosed, "team: bootstrap: %s #%d: called after Close", op, m.seq)
	}
	if err := ctx.Err(); err != nil {
		return nil, fmt.Errorf("team: bootstrap: %s #%d: %w", op, m.seq, err)
	}
	g.mu.Lock()
	if g.broken != nil {
		err := g.broken
		g.mu.Unlock()
		return nil, err
	}
	if gone := closedRanks(g.closed); len(gone) > 0 {
		err := tagged(ErrBootstrapClosed, "team: bootstrap: %s #%d: rank(s) %v closed their bootstrap", op, m.seq, gone)
		g.breakLocked(err)
		g.mu.Unlock()
		return nil, err
	}
	seq := m.seq
	m.seq++
	r := g.rounds[seq]
	if r == nil {
		r = &round{op: op, seq: seq, arrived: make([]bool, g.n), data: make([][]byte, g.n), fds: make([]int, g.n), done: make(chan struct{})}
		g.rounds[seq] = r
	}
	if r.op != op {
		var others []int
		for i, a := range r.arrived {
			if a {
				others = append(others, i)
			}
		}
		err := fmt.Errorf("team: bootstrap: collective #%d: rank %d called %s where rank(s) %v called %s", seq, m.rank, op, others, r.op)
		g.breakLocked(err)
		g.mu.Unlock()
		return nil, err
	}
	r.arrived[m.rank] = true
	r.count++
	r.data[m.rank] = slices.Clone(data)
	r.fds[m.rank] = fd
	if r.count == g.n {
		g.completeLocked(r)
	}
	g.mu.Unlock()

	select {
	case <-r.done:
	case <-ctx.Done():
		g.mu.Lock()
		select {
		case <-r.done: // completed meanwhile: take the result
		default:
			g.breakLocked(&MissingRanksError{Op: op, Seq: seq, Rank: m.rank, Missing: missing(r.arrived), Err: ctx.Err()})
		}
		g.mu.Unlock()
	}
	if r.err != nil {
		return nil, r.err
	}
	return r, nil
}

func closedRanks(closed []bool) []int {
	var out []int
	for i, c := range closed {
		if c {
			out = append(out, i)
		}
	}
	return out
}

func missing(arrived []bool) []int {
	var out []int
	for i, a := range arrived {
		if !a {
			out = append(out, i)
		}
	}
	return out
}

// collected marks this rank's results taken; the last one forgets the
// round.
func (g *group) collected(r *round) {
	g.mu.Lock()
	r.collected++
	if r.collected == g.n {
		delete(g.rounds, r.seq)
	}
	g.mu.Unlock()
}

// AllGather implements Bootstrap.
func (m *member) AllGather(ctx context.Context, mine []byte) ([][]byte, error) {
	r, err := m.collective(ctx, "AllGather", mine, -1)
	if err != nil {
		return nil, err
	}
	out := make([][]byte, len(r.data))
	for i, b := range r.data {
		out[i] = slices.Clone(b)
	}
	m.g.collected(r)
	return out, nil
}

// Barrier implements Bootstrap.
func (m *member) Barrier(ctx context.Context) error {
	r, err := m.collective(ctx, "Barrier", nil, -1)
	if err != nil {
		return err
	}
	m.g.collected(r)
	return nil
}

// AllGatherFDs implements Bootstrap: every receiver gets its own
// duplicates (close-on-exec) of every rank's FD, its own included.
func (m *member) AllGatherFDs(ctx context.Context, fd int) ([]int, error) {
	if fd < -1 {
		return nil, fmt.Errorf("team: bootstrap: AllGatherFDs: invalid fd %d", fd)
	}
	r, err := m.collective(ctx, "AllGatherFDs", nil, fd)
	if err != nil {
		return nil, err
	}
	out := r.out[m.rank]
	r.out[m.rank] = nil
	m.g.collected(r)
	return out, nil
}

// Close implements Bootstrap. Ranks waiting for this one in a collective
// fail with ErrBootstrapClosed, and so does every later collective.
func (m *member) Close() error {
	if m.closed {
		return nil
	}
	m.closed = true
	g := m.g
	g.mu.Lock()
	defer g.mu.Unlock()
	g.closed[m.rank] = true
	for _, r := range g.rounds {
		select {
		case <-r.done:
			continue
		default:
		}
		if !r.arrived[m.rank] {
			g.breakLocked(tagged(ErrBootstrapClosed, "team: bootstrap: %s #%d: rank %d closed its bootstrap", r.op, r.seq, m.rank))
			break
		}
	}
	return nil
}
