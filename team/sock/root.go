//go:build linux

package sock

import (
	"crypto/rand"
	"crypto/subtle"
	"encoding/binary"
	"encoding/hex"
	"fmt"
	"log/slog"
	"net"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/nvls-go/nvls/team/mpi/fdpass"
)

// DefaultTimeout bounds Join and each collective whose context has no
// deadline, and the rendezvous's wait for the ranks (NewID's timeout 0).
const DefaultTimeout = 60 * time.Second

// helloTimeout bounds a connection's hello.
const helloTimeout = 10 * time.Second

// NewID starts a rendezvous in this process and returns its ID. The
// rendezvous waits up to timeout (0: DefaultTimeout) from the first rank's
// arrival for the others; then, or once every rank has come, it closes its
// listener. It relays the ranks' collectives until they all close their
// bootstraps. log gets its refusals (nil: slog.Default()).
func NewID(timeout time.Duration, log *slog.Logger) (ID, error) {
	if timeout <= 0 {
		timeout = DefaultTimeout
	}
	if log == nil {
		log = slog.Default()
	}
	token, err := fdpass.NewToken()
	if err != nil {
		return ID{}, err
	}
	var rnd [8]byte
	if _, err := rand.Read(rnd[:]); err != nil {
		return ID{}, err
	}
	name := "nvls-" + hex.EncodeToString(rnd[:])
	id, err := makeID(token, os.Getpid(), name)
	if err != nil {
		return ID{}, err
	}
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: "@" + name, Net: "unix"})
	if err != nil {
		return ID{}, fmt.Errorf("sock: rendezvous: %w", err)
	}
	r := &root{ln: ln, token: token, timeout: timeout, log: log.With("rendezvous", "@"+name),
		rounds: map[uint64]*relay{}}
	go r.accept()
	return id, nil
}

// root is a rendezvous and, after it, the relay of the ranks' collectives.
type root struct {
	ln      *net.UnixListener
	token   []byte
	timeout time.Duration
	log     *slog.Logger

	mu     sync.Mutex
	n      int // the rank count, from the first hello
	conns  []*net.UnixConn
	paths  [][]byte
	timer  *time.Timer
	closed bool // the listener is closed: the rendezvous is over
	ready  bool // every rank came
	rounds map[uint64]*relay
	left   []bool
	failed string // why the relay stopped, once it did
}

// relay is one collective in flight: the parts that came.
type relay struct {
	parts [][]byte
	came  []bool
	here  int
}

func (r *root) accept() {
	for {
		c, err := r.ln.AcceptUnix()
		if err != nil {
			return // closed
		}
		go r.greet(c)
	}
}

func (r *root) refuse(c *net.UnixConn, why string, args ...any) {
	msg := fmt.Sprintf(why, args...)
	r.log.Warn("sock: rendezvous refused a connection: " + msg)
	_ = c.SetWriteDeadline(time.Now().Add(helloTimeout))
	_ = writeFrame(c, refusal(msg))
	_ = c.Close()
}

// greet checks a new connection's hello and adds its rank.
func (r *root) greet(c *net.UnixConn) {
	if uid, err := peerUID(c); err != nil || uid != os.Getuid() {
		r.refuse(c, "peer uid %d is not this process's %d (%v)", uid, os.Getuid(), err)
		return
	}
	_ = c.SetReadDeadline(time.Now().Add(helloTimeout))
	b, err := readFrame(c)
	if err != nil {
		_ = c.Close()
		return
	}
	h, err := parseHello(b)
	if err != nil {
		r.refuse(c, "%v", err)
		return
	}
	_ = c.SetReadDeadline(time.Time{})
	if subtle.ConstantTimeCompare(h.token, r.token) != 1 {
		r.refuse(c, "wrong job token from pid %d (a forged or corrupted unique id, or one of another job)", h.pid)
		return
	}
	r.mu.Lock()
	defer r.mu.Unlock()
	switch {
	case r.closed:
		r.refuse(c, "the rendezvous is over (its job started or gave up)")
		return
	case h.nranks < 1 || h.rank < 0 || h.rank >= h.nranks:
		r.refuse(c, "rank %d of %d ranks is out of range", h.rank, h.nranks)
		return
	case r.n != 0 && h.nranks != r.n:
		r.refuse(c, "rank %d says %d ranks, the ranks before it said %d", h.rank, h.nranks, r.n)
		return
	}
	if r.n == 0 {
		r.n = h.nranks
		r.conns, r.paths, r.left = make([]*net.UnixConn, r.n), make([][]byte, r.n), make([]bool, r.n)
		r.timer = time.AfterFunc(r.timeout, r.expire)
	}
	if r.conns[h.rank] != nil {
		r.refuse(c, "rank %d joined twice (pids: the second is %d)", h.rank, h.pid)
		return
	}
	r.conns[h.rank], r.paths[h.rank] = c, []byte(h.path)
	if slices.Contains(r.conns, nil) {
		return
	}
	r.timer.Stop()
	r.closed, r.ready = true, true
	_ = r.ln.Close()
	reply := okReply(r.paths)
	for rank, rc := range r.conns {
		_ = rc.SetWriteDeadline(time.Now().Add(helloTimeout))
		if err := writeFrame(rc, reply); err != nil {
			r.log.Warn("sock: rendezvous: could not answer a rank", "rank", rank, "err", err)
		}
		_ = rc.SetWriteDeadline(time.Time{})
		go r.serve(rank, rc)
	}
}

// expire ends a rendezvous that not every rank came to in time.
func (r *root) expire() {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.ready {
		return
	}
	r.closed = true
	_ = r.ln.Close()
	var missing []int
	for rank, c := range r.conns {
		if c == nil {
			missing = append(missing, rank)
		}
	}
	msg := fmt.Sprintf("rank(s) %v of %d did not join within the rendezvous's %v", missing, r.n, r.timeout)
	for _, c := range r.conns {
		if c != nil {
			_ = c.SetWriteDeadline(time.Now().Add(helloTimeout))
			_ = writeFrame(c, refusal(msg))
			_ = c.Close()
		}
	}
}

// serve relays rank's collectives: each frame is a sequence number and
// the rank's part.
func (r *root) serve(rank int, c *net.UnixConn) {
	defer c.Close()
	for {
		b, err := readFrame(c)
		if err != nil || len(b) < 8 {
			r.leave(rank)
			return
		}
		seq := binary.LittleEndian.Uint64(b)
		r.part(rank, seq, b[8:])
	}
}

func (r *root) part(rank int, seq uint64, data []byte) {
	r.mu.Lock()
	defer r.mu.Unlock()
	if r.failed != "" {
		r.send(rank, refusal(r.failed))
		return
	}
	rl := r.rounds[seq]
	if rl == nil {
		rl = &relay{parts: make([][]byte, r.n), came: make([]bool, r.n)}
		r.rounds[seq] = rl
	}
	rl.parts[rank], rl.came[rank] = data, true
	rl.here++
	if rl.here < r.n {
		return
	}
	delete(r.rounds, seq)
	reply := okReply(rl.parts)
	for q := range r.conns {
		r.send(q, reply)
	}
}

// send writes a reply to rank q (under r.mu), bounded.
func (r *root) send(q int, b []byte) {
	c := r.conns[q]
	_ = c.SetWriteDeadline(time.Now().Add(helloTimeout))
	if err := writeFrame(c, b); err != nil {
		r.log.Warn("sock: relay: could not answer a rank", "rank", q, "err", err)
	}
}

// leave notes that rank closed its connection: every collective waiting
// for it, and every later one, fails naming it.
func (r *root) leave(rank int) {
	r.mu.Lock()
	defer r.mu.Unlock()
	r.left[rank] = true
	if r.failed == "" {
		r.failed = fmt.Sprintf("rank %d left (closed its bootstrap or exited)", rank)
	}
	for seq, rl := range r.rounds {
		delete(r.rounds, seq)
		for q, came := range rl.came {
			if came && !r.left[q] {
				r.send(q, refusal(r.failed))
			}
		}
	}
}
