//go:build linux

package fdpass

import (
	"context"
	"crypto/subtle"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"net"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"syscall"
	"time"
)

// DefaultTimeout bounds a step whose context carries no deadline.
const DefaultTimeout = 60 * time.Second

// DefaultHandshakeTimeout bounds one incoming connection, from accept to
// the last byte, when Config.HandshakeTimeout is zero.
const DefaultHandshakeTimeout = 10 * time.Second

// DefaultMaxConns is Config.MaxConns when it is zero: far more than a job
// of up to 64 ranks opens at once (one connection per peer and exchange).
const DefaultMaxConns = 64

// DefaultMaxEarly is Config.MaxEarly when it is zero. In Exchange a peer
// is at most one exchange ahead of this rank (it cannot finish exchange
// s+1 before this rank sent its own, which this rank does only after
// collecting s), so a well-behaved peer has at most two early
// descriptors: exchange s's, arrived before this rank's Collect began,
// and s+1's.
const DefaultMaxEarly = 4

// maxSocketPath is the longest path a Unix socket address can hold
// (sun_path is 108 bytes with its terminating NUL).
const maxSocketPath = 107

// Errors of this package; match with errors.Is.
var (
	// ErrRefused: the other end refused the connection (wrong token,
	// wrong uid, unexpected ranks, a duplicate, ...). The error text
	// carries the reason.
	ErrRefused = errors.New("fdpass: refused")
	// ErrClosed: the server was closed.
	ErrClosed = errors.New("fdpass: server closed")
	// ErrPathTooLong: the socket path does not fit a Unix socket address.
	ErrPathTooLong = errors.New("fdpass: socket path too long")
	// ErrUnsafeDir: the socket directory is not private to this user.
	ErrUnsafeDir = errors.New("fdpass: socket directory not private")
)

// MissingError says which ranks did not deliver a descriptor in time.
type MissingError struct {
	Seq   uint64
	Ranks []int
	Err   error // why the wait ended: context.DeadlineExceeded, ...
}

func (e *MissingError) Error() string {
	return fmt.Sprintf("fdpass: exchange %d: no descriptor from rank(s) %v: %v", e.Seq, e.Ranks, e.Err)
}

func (e *MissingError) Unwrap() error { return e.Err }

// PeerError is a failure to deliver a descriptor to one rank.
type PeerError struct {
	Rank int
	Err  error
}

func (e *PeerError) Error() string {
	return fmt.Sprintf("fdpass: send to rank %d: %v", e.Rank, e.Err)
}

func (e *PeerError) Unwrap() error { return e.Err }

// Config describes a Server.
type Config struct {
	// Token is the job's token (TokenSize bytes): peers must present it.
	Token []byte
	// Rank is this server's rank and Size the number of ranks.
	Rank, Size int
	// Job goes into the directory name, to tell jobs apart (letters and
	// digits are kept, at most 16). Optional.
	Job string
	// Parent is where the private socket directory is created; "" means
	// DefaultParent().
	Parent string
	// HandshakeTimeout bounds each incoming connection; 0 means
	// DefaultHandshakeTimeout.
	HandshakeTimeout time.Duration
	// Logger gets refusals (WARN) and accepted descriptors (DEBUG); nil
	// means slog.Default().
	Logger *slog.Logger
	// MaxConns caps the connections handled at once: one more is refused
	// as soon as it is accepted (answered, logged, closed). 0 means
	// DefaultMaxConns.
	MaxConns int
	// MaxEarly caps the early descriptors of each sender: received for an
	// exchange that no Collect is waiting for yet. One more is refused
	// (answered, logged, and closed if it was received already); one that
	// a Collect in progress waits for is never refused by the cap. 0 means
	// DefaultMaxEarly.
	MaxEarly int
}

type key struct {
	seq  uint64
	from int
}

// Server receives descriptors pushed by the other ranks of a job. It is
// safe for concurrent use.
type Server struct {
	token   []byte
	rank    int
	size    int
	timeout time.Duration
	maxConn int
	early   int
	log     *slog.Logger
	uid     int
	dir     string
	path    string
	ln      *net.UnixListener

	mu      sync.Mutex
	inbox   map[key]int    // descriptors received, -1 for "none"
	waiting map[uint64]int // sequences Collect waits for (how many calls)
	floor   uint64         // sequences below floor are finished
	changed chan struct{}
	conns   map[*net.UnixConn]struct{}
	closed  bool
	done    chan struct{}
	wg      sync.WaitGroup
}

// DefaultParent is the directory sockets are created under:
// $XDG_RUNTIME_DIR when it is set and private to this user, else
// os.TempDir().
func DefaultParent() string {
	if d := os.Getenv("XDG_RUNTIME_DIR"); d != "" && filepath.IsAbs(d) {
		if fi, err := os.Stat(d); err == nil && fi.IsDir() && fi.Mode().Perm()&0o077 == 0 {
			if st, ok := fi.Sys().(*syscall.Stat_t); ok && int(st.Uid) == os.Getuid() {
				return d
			}
		}
	}
	return os.TempDir()
}

// Listen creates the private directory and the socket and starts
// accepting connections.
func Listen(cfg Config) (*Server, error) {
	if len(cfg.Token) != TokenSize {
		return nil, fmt.Errorf("fdpass: token is %d bytes, want %d", len(cfg.Token), TokenSize)
	}
	if cfg.Size < 1 || cfg.Rank < 0 || cfg.Rank >= cfg.Size {
		return nil, fmt.Errorf("fdpass: rank %d of %d", cfg.Rank, cfg.Size)
	}
	s := &Server{
		token:   slices.Clone(cfg.Token),
		rank:    cfg.Rank,
		size:    cfg.Size,
		timeout: cfg.HandshakeTimeout,
		maxConn: cfg.MaxConns,
		early:   cfg.MaxEarly,
		log:     cfg.Logger,
		uid:     os.Getuid(),
		inbox:   map[key]int{},
		waiting: map[uint64]int{},
		changed: make(chan struct{}),
		conns:   map[*net.UnixConn]struct{}{},
		done:    make(chan struct{}),
	}
	if s.timeout <= 0 {
		s.timeout = DefaultHandshakeTimeout
	}
	if s.maxConn <= 0 {
		s.maxConn = DefaultMaxConns
	}
	if s.early <= 0 {
		s.early = DefaultMaxEarly
	}
	if s.log == nil {
		s.log = slog.Default()
	}
	parent := cfg.Parent
	if parent == "" {
		parent = DefaultParent()
		// A long $TMPDIR would not fit sun_path: fall back to /tmp.
		if len(parent)+len(dirPattern(cfg.Job, cfg.Rank))+24 > maxSocketPath {
			parent = "/tmp"
		}
	}
	dir, err := privateDir(parent, dirPattern(cfg.Job, cfg.Rank))
	if err != nil {
		return nil, err
	}
	s.dir = dir
	s.path = filepath.Join(dir, "s")
	if len(s.path) > maxSocketPath {
		os.Remove(dir)
		return nil, fmt.Errorf("%w: %q is %d bytes (at most %d)", ErrPathTooLong, s.path, len(s.path), maxSocketPath)
	}
	ln, err := net.ListenUnix("unix", &net.UnixAddr{Name: s.path, Net: "unix"})
	if err != nil {
		os.Remove(dir)
		return nil, fmt.Errorf("fdpass: listen: %w", err)
	}
	ln.SetUnlinkOnClose(true)
	if err := os.Chmod(s.path, 0o600); err != nil {
		ln.Close()
		os.Remove(dir)
		return nil, fmt.Errorf("fdpass: %w", err)
	}
	s.ln = ln
	s.wg.Add(1)
	go s.acceptLoop()
	return s, nil
}

func dirPattern(job string, rank int) string {
	var b strings.Builder
	for _, r := range job {
		if b.Len() == 16 {
			break
		}
		if r < 128 && (r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9') {
			b.WriteRune(r)
		}
	}
	if b.Len() == 0 {
		b.WriteString("job")
	}
	return fmt.Sprintf("nvls-%s-r%d-", b.String(), rank)
}

// privateDir creates a fresh directory under parent and checks that it
// is a directory (not a link), owned by this uid, mode 0700.
func privateDir(parent, pattern string) (string, error) {
	dir, err := os.MkdirTemp(parent, pattern)
	if err != nil {
		return "", fmt.Errorf("fdpass: socket directory: %w", err)
	}
	if err := os.Chmod(dir, 0o700); err != nil {
		os.Remove(dir)
		return "", fmt.Errorf("fdpass: socket directory: %w", err)
	}
	if err := checkPrivate(dir); err != nil {
		os.Remove(dir)
		return "", err
	}
	return dir, nil
}

func checkPrivate(dir string) error {
	fi, err := os.Lstat(dir)
	if err != nil {
		return fmt.Errorf("fdpass: socket directory: %w", err)
	}
	st, ok := fi.Sys().(*syscall.Stat_t)
	switch {
	case !fi.IsDir():
		return fmt.Errorf("%w: %s is not a directory", ErrUnsafeDir, dir)
	case fi.Mode().Perm() != 0o700:
		return fmt.Errorf("%w: %s has mode %v", ErrUnsafeDir, dir, fi.Mode().Perm())
	case !ok || int(st.Uid) != os.Getuid():
		return fmt.Errorf("%w: %s is not owned by uid %d", ErrUnsafeDir, dir, os.Getuid())
	}
	return nil
}

// Path is the socket's path: what peers pass to Send.
func (s *Server) Path() string { return s.path }

// Dir is the private directory holding the socket.
func (s *Server) Dir() string { return s.dir }

// Rank is the rank this server receives for.
func (s *Server) Rank() int { return s.rank }

// Size is the number of ranks of the job.
func (s *Server) Size() int { return s.size }

// Close stops accepting, ends connections in progress, closes every
// descriptor received but not collected, and removes the socket and its
// directory. It may be called more than once.
func (s *Server) Close() error {
	s.mu.Lock()
	if s.closed {
		s.mu.Unlock()
		return nil
	}
	s.closed = true
	close(s.done)
	for c := range s.conns {
		c.Close()
	}
	s.mu.Unlock()
	err := s.ln.Close()
	s.wg.Wait()
	s.mu.Lock()
	for k, fd := range s.inbox {
		if fd >= 0 {
			syscall.Close(fd)
		}
		delete(s.inbox, k)
	}
	s.mu.Unlock()
	if rerr := os.RemoveAll(s.dir); rerr != nil {
		err = errors.Join(err, rerr)
	}
	if err != nil && !errors.Is(err, net.ErrClosed) {
		return fmt.Errorf("fdpass: close: %w", err)
	}
	return nil
}

func (s *Server) acceptLoop() {
	defer s.wg.Done()
	for {
		c, err := s.ln.AcceptUnix()
		if err != nil {
			select {
			case <-s.done:
				return
			default:
			}
			if errors.Is(err, net.ErrClosed) {
				return
			}
			s.log.Warn("fdpass: accept", "rank", s.rank, "err", err)
			time.Sleep(10 * time.Millisecond)
			continue
		}
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			c.Close()
			return
		}
		if n := len(s.conns); n >= s.maxConn {
			s.mu.Unlock()
			// Answered here, not in a goroutine of its own: a flood of
			// connections holds no more than MaxConns of them.
			cred, _ := peerCred(c)
			s.refuse(c, cred, fmt.Sprintf("too many connections (%d at once, the cap)", n))
			c.Close()
			continue
		}
		s.conns[c] = struct{}{}
		s.wg.Add(1)
		s.mu.Unlock()
		go func() {
			defer s.wg.Done()
			s.handle(c)
			// Closed before its slot is given back: MaxConns bounds
			// the descriptors held, too.
			c.Close()
			s.mu.Lock()
			delete(s.conns, c)
			s.mu.Unlock()
		}()
	}
}

// peerCred returns the credentials the peer had when it connected.
func peerCred(c *net.UnixConn) (*syscall.Ucred, error) {
	raw, err := c.SyscallConn()
	if err != nil {
		return nil, err
	}
	var cred *syscall.Ucred
	var cerr error
	if err := raw.Control(func(fd uintptr) {
		cred, cerr = syscall.GetsockoptUcred(int(fd), syscall.SOL_SOCKET, syscall.SO_PEERCRED)
	}); err != nil {
		return nil, err
	}
	return cred, cerr
}

// refuse answers the reason, logs it and leaves the connection to be
// closed by the caller.
func (s *Server) refuse(c *net.UnixConn, cred *syscall.Ucred, reason string) {
	attrs := []any{"rank", s.rank, "socket", s.path, "reason", reason}
	if cred != nil {
		attrs = append(attrs, "peer_pid", cred.Pid, "peer_uid", cred.Uid, "peer_gid", cred.Gid)
	}
	s.log.Warn("fdpass: refused connection", attrs...)
	// The connection's deadline may be what ended it: allow the answer a
	// moment of its own.
	c.SetWriteDeadline(time.Now().Add(time.Second))
	c.Write(refusal(reason))
}

// handle runs one incoming connection: the peer's credentials and hello
// are checked, the descriptor message read and the descriptor filed in
// the inbox. Every refusal is answered, logged and closes what came.
func (s *Server) handle(c *net.UnixConn) {
	c.SetDeadline(time.Now().Add(s.timeout))
	cred, err := peerCred(c)
	if err != nil {
		s.refuse(c, nil, "no peer credentials: "+err.Error())
		return
	}
	h, reason := s.greet(c, cred)
	if reason != "" {
		s.refuse(c, cred, reason)
		return
	}
	if _, err := c.Write([]byte{statusOK}); err != nil {
		return
	}
	k := key{h.Seq, int(h.From)}
	fds, reason := readRights(c, h.HasFD)
	fd := -1
	if reason == "" {
		fd, reason = s.file(k, fds)
	}
	if reason != "" {
		closeAll(fds)
		s.refuse(c, cred, reason)
		return
	}
	s.log.Debug("fdpass: received", "rank", s.rank, "from", k.from, "seq", h.Seq, "fd", fd, "peer_pid", cred.Pid)
	c.Write([]byte{statusOK})
}

// greet reads and checks the peer's hello: its uid, the job token, the
// ranks, and that its descriptor is admissible now. It returns why the
// peer is refused, or "".
func (s *Server) greet(c *net.UnixConn, cred *syscall.Ucred) (hello, string) {
	if int(cred.Uid) != s.uid {
		return hello{}, fmt.Sprintf("peer uid %d is not this job's uid %d", cred.Uid, s.uid)
	}
	buf := make([]byte, helloSize)
	if _, err := io.ReadFull(c, buf); err != nil {
		return hello{}, "reading hello: " + err.Error()
	}
	h, err := parseHello(buf)
	if err != nil {
		return h, err.Error()
	}
	if subtle.ConstantTimeCompare(h.Token[:], s.token) != 1 {
		return h, "wrong job token"
	}
	from := int(h.From)
	switch {
	case int(h.To) != s.rank:
		return h, fmt.Sprintf("addressed to rank %d, this is rank %d", h.To, s.rank)
	case h.From >= uint32(s.size) || from == s.rank:
		return h, fmt.Sprintf("sender rank %d invalid (size %d, self %d)", h.From, s.size, s.rank)
	}
	return h, s.admissible(key{h.Seq, from})
}

// readRights reads the descriptor message: one byte of data, and
// SCM_RIGHTS with one descriptor when the hello announced one (hasFD).
// It returns the descriptors that came, which the caller closes if
// refused, and why the message is refused, or "".
func readRights(c *net.UnixConn, hasFD bool) ([]int, string) {
	// Room for a few descriptors, so that extra ones are seen (and
	// closed) rather than truncated.
	var one [1]byte
	oob := make([]byte, syscall.CmsgSpace(4*4))
	n, oobn, flags, _, err := c.ReadMsgUnix(one[:], oob)
	fds, perr := rights(oob[:oobn])
	if err == nil {
		err = perr
	}
	want := 0
	if hasFD {
		want = 1
	}
	switch {
	case err != nil:
		return fds, "reading descriptor: " + err.Error()
	case n != 1 || flags&syscall.MSG_CTRUNC != 0 || len(fds) != want:
		return fds, fmt.Sprintf("descriptor message malformed: %d bytes, %d descriptors (want %d), flags %#x", n, len(fds), want, flags)
	}
	return fds, ""
}

// file puts the descriptor (fds[0], or -1 when none came) in the inbox
// under k, if it is still admissible, and wakes the Collects. It returns
// the descriptor filed and why it was refused, or "".
func (s *Server) file(k key, fds []int) (int, string) {
	fd := -1
	if len(fds) == 1 {
		fd = fds[0]
	}
	s.mu.Lock()
	defer s.mu.Unlock()
	if reason := s.admissibleLocked(k); reason != "" {
		return fd, reason
	}
	s.inbox[k] = fd
	close(s.changed)
	s.changed = make(chan struct{})
	return fd, ""
}

func (s *Server) admissible(k key) string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.admissibleLocked(k)
}

func (s *Server) admissibleLocked(k key) string {
	switch {
	case s.closed:
		return "server closing"
	case k.seq < s.floor:
		return fmt.Sprintf("exchange %d already finished", k.seq)
	}
	if _, dup := s.inbox[k]; dup {
		return fmt.Sprintf("duplicate descriptor from rank %d for exchange %d", k.from, k.seq)
	}
	if s.waiting[k.seq] > 0 {
		return ""
	}
	early := 0
	for q := range s.inbox {
		if q.from == k.from && s.waiting[q.seq] == 0 {
			early++
		}
	}
	if early >= s.early {
		return fmt.Sprintf("rank %d already has %d descriptors waiting for exchanges not collected yet (the cap)", k.from, early)
	}
	return ""
}

// rights returns the descriptors of every SCM_RIGHTS message in oob.
func rights(oob []byte) ([]int, error) {
	if len(oob) == 0 {
		return nil, nil
	}
	msgs, err := syscall.ParseSocketControlMessage(oob)
	if err != nil {
		return nil, err
	}
	var fds []int
	var first error
	for i := range msgs {
		if msgs[i].Header.Level != syscall.SOL_SOCKET || msgs[i].Header.Type != syscall.SCM_RIGHTS {
			continue
		}
		got, err := syscall.ParseUnixRights(&msgs[i])
		if err != nil && first == nil {
			first = err
		}
		fds = append(fds, got...)
	}
	return fds, first
}

func closeAll(fds []int) {
	for _, fd := range fds {
		if fd >= 0 {
			syscall.Close(fd)
		}
	}
}

// Collect waits until every rank in from has delivered its descriptor for
// exchange seq and returns them by rank (-1 where a rank sent none). The
// descriptors become the caller's. Sequence numbers must grow: once
// Collect for seq returned (either way), later arrivals for seq or below
// are refused, and descriptors that arrived for a failed exchange are
// closed. Without a deadline on ctx, DefaultTimeout applies. On a
// deadline the error is a *MissingError naming the ranks still missing.
func (s *Server) Collect(ctx context.Context, seq uint64, from []int) (map[int]int, error) {
	ctx, cancel := withDefaultDeadline(ctx)
	defer cancel()
	s.mu.Lock()
	s.waiting[seq]++
	s.mu.Unlock()
	defer func() {
		s.mu.Lock()
		if s.waiting[seq]--; s.waiting[seq] <= 0 {
			delete(s.waiting, seq)
		}
		s.mu.Unlock()
	}()
	for {
		s.mu.Lock()
		if s.closed {
			s.mu.Unlock()
			return nil, ErrClosed
		}
		var missing []int
		for _, r := range from {
			if _, ok := s.inbox[key{seq, r}]; !ok {
				missing = append(missing, r)
			}
		}
		if len(missing) == 0 {
			got := make(map[int]int, len(from))
			for _, r := range from {
				got[r] = s.inbox[key{seq, r}]
				delete(s.inbox, key{seq, r})
			}
			s.finishLocked(seq)
			s.mu.Unlock()
			return got, nil
		}
		ch := s.changed
		s.mu.Unlock()
		select {
		case <-ch:
		case <-s.done:
			return nil, ErrClosed
		case <-ctx.Done():
			s.mu.Lock()
			s.finishLocked(seq)
			s.mu.Unlock()
			slices.Sort(missing)
			return nil, &MissingError{Seq: seq, Ranks: missing, Err: ctx.Err()}
		}
	}
}

// finishLocked moves the floor past seq and closes whatever is left in the
// inbox below it (the caller first removed what it collected).
func (s *Server) finishLocked(seq uint64) {
	if seq+1 > s.floor {
		s.floor = seq + 1
	}
	for k, fd := range s.inbox {
		if k.seq < s.floor {
			delete(s.inbox, k)
			if fd >= 0 {
				syscall.Close(fd)
			}
		}
	}
}

func withDefaultDeadline(ctx context.Context) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return context.WithCancel(ctx)
	}
	return context.WithTimeout(ctx, DefaultTimeout)
}
