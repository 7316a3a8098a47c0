//go:build linux

package sock

import (
	"context"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"sync/atomic"
	"syscall"
	"time"

	"github.com/nvls-go/nvls/team"
	"github.com/nvls-go/nvls/team/mpi/fdpass"
)

// Bootstrap is one rank's end of a job that met through an ID: a
// team.Bootstrap across processes (InProcess is false, so handles travel
// as file descriptors).
type Bootstrap struct {
	rank, size int
	token      []byte
	srv        *fdpass.Server
	paths      []string

	closed    atomic.Bool
	closeOnce sync.Once
	closeErr  error

	mu     sync.Mutex
	conn   *net.UnixConn
	seq    uint64 // relayed collectives
	fdSeq  uint64 // descriptor exchanges
	broken error
}

var _ team.Bootstrap = (*Bootstrap)(nil)

// withDeadline gives ctx DefaultTimeout where it has no deadline.
func withDeadline(ctx context.Context) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return context.WithCancel(ctx)
	}
	return context.WithTimeout(ctx, DefaultTimeout)
}

// Join meets the other ranks of the job that id names: nranks ranks,
// this one rank. It returns once every rank has joined, or with an error
// by ctx's deadline (DefaultTimeout without one): ErrBadID, ErrStaleID
// and ErrRefused at once where they apply.
func Join(ctx context.Context, id ID, nranks, rank int) (*Bootstrap, error) {
	token, pid, name, err := id.parse()
	if err != nil {
		return nil, err
	}
	if nranks < 1 || rank < 0 || rank >= nranks {
		return nil, fmt.Errorf("sock: rank %d of %d ranks is out of range", rank, nranks)
	}
	ctx, cancel := withDeadline(ctx)
	defer cancel()
	srv, err := fdpass.Listen(fdpass.Config{Token: token, Rank: rank, Size: nranks, Job: name})
	if err != nil {
		return nil, fmt.Errorf("sock: rank %d: %w", rank, err)
	}
	b := &Bootstrap{rank: rank, size: nranks, token: token, srv: srv}
	if err := b.join(ctx, name, pid); err != nil {
		_ = b.Close()
		return nil, err
	}
	return b, nil
}

func (b *Bootstrap) join(ctx context.Context, name string, pid int) error {
	var d net.Dialer
	nc, err := d.DialContext(ctx, "unix", "@"+name)
	if err != nil {
		if errors.Is(err, syscall.ECONNREFUSED) || errors.Is(err, syscall.ENOENT) {
			return fmt.Errorf("%w: nothing listens at @%s: the process that made the id (pid %d) has exited, or the id's job already started (an id serves one job; make a new one with ncclGetUniqueId)", ErrStaleID, name, pid)
		}
		return fmt.Errorf("sock: rank %d: dial the rendezvous @%s: %w", b.rank, name, err)
	}
	b.conn = nc.(*net.UnixConn)
	stop := b.bound(ctx)
	defer stop()
	h := hello{token: b.token, nranks: b.size, rank: b.rank, pid: os.Getpid(), path: b.srv.Path()}
	if err := writeFrame(b.conn, h.marshal()); err != nil {
		return b.joinErr(ctx, name, err)
	}
	r, err := readFrame(b.conn)
	if err != nil {
		return b.joinErr(ctx, name, err)
	}
	paths, err := parseReply(r)
	if err != nil {
		return fmt.Errorf("sock: rank %d: join: %w", b.rank, err)
	}
	if len(paths) != b.size {
		return fmt.Errorf("sock: rank %d: join: %d ranks' sockets for %d ranks", b.rank, len(paths), b.size)
	}
	for _, p := range paths {
		b.paths = append(b.paths, string(p))
	}
	return nil
}

// bound makes the connection's I/O end at ctx's deadline or cancellation.
func (b *Bootstrap) bound(ctx context.Context) (stop func()) {
	dl, _ := ctx.Deadline()
	_ = b.conn.SetDeadline(dl)
	s := context.AfterFunc(ctx, func() { _ = b.conn.SetDeadline(time.Unix(1, 0)) })
	return func() {
		s()
		_ = b.conn.SetDeadline(time.Time{})
	}
}

// ioErr is an I/O failure of op, as ctx's error where ctx ended it.
func (b *Bootstrap) ioErr(ctx context.Context, op string, err error) error {
	cerr := ctx.Err()
	if cerr == nil && errors.Is(err, os.ErrDeadlineExceeded) {
		cerr = context.DeadlineExceeded // the connection's deadline is ctx's
	}
	if cerr != nil {
		return &team.MissingRanksError{Op: op, Seq: b.seq, Rank: b.rank, Missing: b.others(), Err: cerr}
	}
	return fmt.Errorf("sock: rank %d: %s: the rendezvous went away: %w", b.rank, op, err)
}

// joinErr is join's I/O failure: a rendezvous that closed the
// connection without an answer (it was giving up, or its job starting,
// as this rank dialed) is ErrStaleID, as one that no longer listens.
func (b *Bootstrap) joinErr(ctx context.Context, name string, err error) error {
	closed := errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) ||
		errors.Is(err, syscall.EPIPE) || errors.Is(err, syscall.ECONNRESET)
	if ctx.Err() == nil && closed {
		return fmt.Errorf("%w: the rendezvous at @%s closed the connection without answering (it gave up waiting for the job's ranks, or the job already started): %w", ErrStaleID, name, err)
	}
	return b.ioErr(ctx, "join", err)
}

// others are the ranks other than this one: who may be missing when the
// relay does not answer.
func (b *Bootstrap) others() []int {
	var o []int
	for r := range b.size {
		if r != b.rank {
			o = append(o, r)
		}
	}
	return o
}

// Rank is this rank.
func (b *Bootstrap) Rank() int { return b.rank }

// Size is the number of ranks.
func (b *Bootstrap) Size() int { return b.size }

// InProcess is false: the ranks may be processes.
func (b *Bootstrap) InProcess() bool { return false }

// AllGather returns every rank's data, indexed by rank, relayed by the
// rendezvous.
func (b *Bootstrap) AllGather(ctx context.Context, mine []byte) ([][]byte, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if err := b.usable(); err != nil {
		return nil, err
	}
	ctx, cancel := withDeadline(ctx)
	defer cancel()
	stop := b.bound(ctx)
	defer stop()
	msg := binary.LittleEndian.AppendUint64(nil, b.seq)
	all, err := b.roundTrip(ctx, append(msg, mine...))
	b.seq++
	if err != nil {
		b.broken = err
		return nil, err
	}
	return all, nil
}

func (b *Bootstrap) roundTrip(ctx context.Context, msg []byte) ([][]byte, error) {
	if err := writeFrame(b.conn, msg); err != nil {
		return nil, b.ioErr(ctx, "AllGather", err)
	}
	r, err := readFrame(b.conn)
	if err != nil {
		return nil, b.ioErr(ctx, "AllGather", err)
	}
	all, err := parseReply(r)
	if err != nil {
		return nil, fmt.Errorf("sock: rank %d: AllGather #%d: %w", b.rank, b.seq, err)
	}
	if len(all) != b.size {
		return nil, fmt.Errorf("sock: rank %d: AllGather #%d: %d parts for %d ranks", b.rank, b.seq, len(all), b.size)
	}
	return all, nil
}

// usable is why the bootstrap takes no more exchanges (nil: it does),
// with b.mu held.
func (b *Bootstrap) usable() error {
	if b.broken != nil {
		return b.broken
	}
	if b.closed.Load() {
		return team.ErrBootstrapClosed
	}
	return nil
}

// Barrier returns once every rank has entered it.
func (b *Bootstrap) Barrier(ctx context.Context) error {
	_, err := b.AllGather(ctx, nil)
	return err
}

// AllGatherFDs passes fd to every rank and returns theirs (fdpass); the
// returned descriptors are the caller's.
func (b *Bootstrap) AllGatherFDs(ctx context.Context, fd int) ([]int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	if err := b.usable(); err != nil {
		return nil, err
	}
	ctx, cancel := withDeadline(ctx)
	defer cancel()
	seq := b.fdSeq
	b.fdSeq++
	fds, err := b.srv.Exchange(ctx, seq, b.paths, fd)
	if err != nil {
		b.broken = fmt.Errorf("sock: rank %d: AllGatherFDs #%d: %w", b.rank, seq, err)
		return nil, b.broken
	}
	return fds, nil
}

// Close leaves the job: the rendezvous fails the others' later
// collectives naming this rank. It does not wait for a collective in
// progress (that one fails), and may be called more than once.
func (b *Bootstrap) Close() error {
	b.closeOnce.Do(func() {
		b.closed.Store(true)
		if b.conn != nil {
			b.closeErr = b.conn.Close()
		}
		b.closeErr = errors.Join(b.closeErr, b.srv.Close())
	})
	return b.closeErr
}
