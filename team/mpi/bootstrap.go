//go:build mpi

package mpi

import (
	"context"
	"crypto/rand"
	"encoding/hex"
	"errors"
	"fmt"
	"log/slog"
	"os"
	"slices"
	"strings"
	"sync"
	"time"

	gompi "github.com/sbromberger/gompi"

	"github.com/nvls-go/nvls/cuda"
	"github.com/nvls-go/nvls/internal/deadline"
	"github.com/nvls-go/nvls/internal/env"
	"github.com/nvls-go/nvls/team"
	"github.com/nvls-go/nvls/team/mpi/fdpass"
	"github.com/nvls-go/nvls/team/mpi/handletype"
)

// DefaultTimeout bounds a collective whose context has no deadline, and
// MPI_Finalize, when neither WithTimeout nor NVLS_SETUP_TIMEOUT says
// otherwise.
const DefaultTimeout = 2 * time.Minute

// EnvSetupTimeout is the environment variable that sets the default
// timeout (WithTimeout wins over it): a duration as every duration of
// nvls's environment is read, a Go duration ("90s", "2m") or a number of
// seconds ("90", "2.5"). It is the variable package team reads for its
// bring-up's deadline (team.EnvSetupTimeout).
const EnvSetupTimeout = team.EnvSetupTimeout

// setupTimeoutFromEnv reads NVLS_SETUP_TIMEOUT: ok is false when it is
// unset or blank; a bad value is a *team.EnvError.
func setupTimeoutFromEnv() (d time.Duration, ok bool, err error) {
	d, ok, err = env.OS.Duration(EnvSetupTimeout)
	if err != nil {
		return 0, false, fmt.Errorf("mpi: %w", err)
	}
	return d, ok, nil
}

// Tags: MPI guarantees tags up to 32767 (gompi's MaxTag reads
// MPI_TAG_UB wrongly, so this package does not use it). Collective number
// seq uses tag 1 + seq%maxTag.
const maxTag = 32000

// guard is the number of guard bytes on each side of a receive buffer.
const guard = 16

// Option configures New.
type Option func(*options)

type options struct {
	log     *slog.Logger
	timeout time.Duration
	// timeoutSrc says where timeout came from, as the errors of a
	// collective it ended name it.
	timeoutSrc string
	keepMPI    bool
	parent     string
	handshake  time.Duration
	handleType cuda.HandleType
	probe      handletype.Probe
}

// WithLogger sets the logger (default slog.Default()): refused
// connections at WARN, the shareable-handle choice at INFO.
func WithLogger(l *slog.Logger) Option { return func(o *options) { o.log = l } }

// WithTimeout sets the deadline of collectives whose context has none,
// and the bound on MPI_Finalize. It wins over NVLS_SETUP_TIMEOUT; without
// either, DefaultTimeout.
func WithTimeout(d time.Duration) Option { return func(o *options) { o.timeout = d } }

// KeepMPI keeps MPI initialized when this Bootstrap closes: the program
// calls Finalize itself.
func KeepMPI() Option { return func(o *options) { o.keepMPI = true } }

// WithSocketDir sets the directory under which the private socket
// directory is made (default fdpass.DefaultParent()).
func WithSocketDir(dir string) Option { return func(o *options) { o.parent = dir } }

// WithHandshakeTimeout bounds each incoming descriptor connection
// (default fdpass.DefaultHandshakeTimeout).
func WithHandshakeTimeout(d time.Duration) Option { return func(o *options) { o.handshake = d } }

// Bootstrap is one rank's MPI bootstrap: a team.Bootstrap for a team
// whose ranks are processes. Collectives are serialized: call them from
// one goroutine at a time, in the same order on every rank.
type Bootstrap struct {
	comm    *gompi.Communicator
	rank    int
	size    int
	o       options
	log     *slog.Logger
	srv     *fdpass.Server
	paths   []string
	hostKey []string

	localRank, localSize, hosts int
	localFrom                   string

	// token is the job's token (rank 0's), as the descriptor server
	// checks it.
	token []byte

	mu     sync.Mutex
	seq    uint64
	broken error
	closed bool
}

var _ team.Bootstrap = (*Bootstrap)(nil)

// New brings up this rank's bootstrap; every rank of MPI_COMM_WORLD calls
// it. It initializes MPI if needed (Init), creates the Bootstrap's
// communicator, hands rank 0's random job token to every rank, starts
// this rank's descriptor server and all-gathers the socket paths and
// host identities. ctx bounds all but MPI_Init and the communicator's
// creation (see the package documentation).
func New(ctx context.Context, opts ...Option) (*Bootstrap, error) {
	var o options
	for _, f := range opts {
		if f != nil {
			f(&o)
		}
	}
	// A bad NVLS_SETUP_TIMEOUT is an error even where WithTimeout makes
	// it moot, so that a typo never goes unnoticed (as in package team).
	envTimeout, envSet, err := setupTimeoutFromEnv()
	if err != nil {
		return nil, err
	}
	switch {
	case o.timeout > 0:
		o.timeoutSrc = fmt.Sprintf("WithTimeout(%v)", o.timeout)
	case envSet:
		o.timeout = envTimeout
		o.timeoutSrc = env.OS.DurationSetting(EnvSetupTimeout, envTimeout)
	default:
		o.timeout = DefaultTimeout
		o.timeoutSrc = fmt.Sprintf("%v, the default; %s or WithTimeout sets it", DefaultTimeout, EnvSetupTimeout)
	}
	if o.log == nil {
		o.log = slog.Default()
	}
	proc.mu.Lock()
	if err := initLocked(); err != nil {
		proc.mu.Unlock()
		return nil, err
	}
	proc.open++
	proc.mu.Unlock()

	b := &Bootstrap{o: o, log: o.log}
	if err := b.setup(ctx); err != nil {
		b.release()
		return nil, err
	}
	return b, nil
}

func (b *Bootstrap) setup(ctx context.Context) (err error) {
	ctx, cancel := b.withDeadline(ctx)
	defer cancel()
	defer func() { err = deadline.Explain(ctx, err) }()
	// Every rank says hello on MPI_COMM_WORLD first, so that a rank that
	// never calls New is named (MPI_Comm_create below would just wait).
	if err := b.hello(ctx); err != nil {
		return err
	}
	world := gompi.WorldSize()
	ranks := make([]int, world)
	for i := range ranks {
		ranks[i] = i
	}
	// A communicator of our own (MPI_Comm_create is collective and not
	// bounded by a deadline; every rank is known to be here, though).
	made := make(chan *gompi.Communicator, 1)
	go func() { made <- gompi.NewCommunicator(ranks) }()
	select {
	case b.comm = <-made:
	case <-ctx.Done():
		return fmt.Errorf("mpi: creating the communicator: %w", ctx.Err())
	}
	b.rank, b.size = b.comm.Rank(), b.comm.Size()

	// Rank 0's token and job id reach every rank.
	var mine []byte
	if b.rank == 0 {
		tok, err := fdpass.NewToken()
		if err != nil {
			return err
		}
		job := make([]byte, 6)
		if _, err := rand.Read(job); err != nil {
			return fmt.Errorf("mpi: job id: %w", err)
		}
		mine = append(tok, hex.EncodeToString(job)...)
	}
	all, err := b.gather(ctx, "setup", mine)
	if err != nil {
		return err
	}
	if len(all[0]) <= fdpass.TokenSize {
		return fmt.Errorf("mpi: setup: rank 0 sent %d bytes of token and job id", len(all[0]))
	}
	token, job := all[0][:fdpass.TokenSize], string(all[0][fdpass.TokenSize:])
	b.token = token

	// Every rank's socket and host, with any rank's failure known to all.
	srv, lerr := fdpass.Listen(fdpass.Config{Token: token, Rank: b.rank, Size: b.size, Job: job,
		Parent: b.o.parent, HandshakeTimeout: b.o.handshake, Logger: b.log})
	b.srv = srv
	var rec []byte
	if lerr != nil {
		rec = append([]byte{1}, lerr.Error()...)
	} else {
		rec = append([]byte{0}, encodeParts([][]byte{[]byte(srv.Path()), []byte(hostKey())})...)
	}
	all, err = b.gather(ctx, "setup", rec)
	if err != nil {
		return errors.Join(lerr, err)
	}
	b.paths = make([]string, b.size)
	b.hostKey = make([]string, b.size)
	for r, m := range all {
		if len(m) == 0 || m[0] != 0 {
			if lerr != nil {
				return lerr
			}
			return fmt.Errorf("mpi: setup: rank %d could not start its descriptor server: %s", r, m[min(1, len(m)):])
		}
		parts, err := decodeParts(m[1:], 2)
		if err != nil {
			return fmt.Errorf("mpi: setup: rank %d: %w", r, err)
		}
		b.paths[r], b.hostKey[r] = string(parts[0]), string(parts[1])
	}
	b.localRanks()
	return nil
}

// helloTag is the tag of New's first exchange, on MPI_COMM_WORLD (before
// the Bootstrap has a communicator of its own): the largest tag MPI
// guarantees, which programs rarely use.
const helloTag = 32767

// helloOp names New's first exchange; its number (the count of New
// calls in this process) tells rank 0 to drop a hello a late rank left
// from an earlier New that failed.
func helloOp(n uint64) string { return fmt.Sprintf("New#%d", n) }

// staleHello reports whether a hello named got is from an earlier New
// than want.
func staleHello(got, want string) bool {
	var g, w uint64
	if _, err := fmt.Sscanf(got, "New#%d", &g); err != nil {
		return false
	}
	if _, err := fmt.Sscanf(want, "New#%d", &w); err != nil {
		return false
	}
	return g < w
}

// hello is New's first exchange: on MPI_COMM_WORLD, every rank to rank 0
// and back, bounded by ctx. A rank that did not arrive is named in a
// *team.MissingRanksError (Op "New").
func (b *Bootstrap) hello(ctx context.Context) error {
	proc.mu.Lock()
	proc.news++
	n := proc.news
	proc.mu.Unlock()
	world := gompi.NewCommunicator(nil)
	b.comm, b.rank, b.size = world, world.Rank(), world.Size()
	if b.size == 1 {
		return nil
	}
	var err error
	if b.rank == 0 {
		_, err = b.root(ctx, helloOp(n), 0, helloTag, nil)
	} else {
		_, err = b.leaf(ctx, helloOp(n), 0, helloTag, nil)
	}
	var me *team.MissingRanksError
	if errors.As(err, &me) {
		me.Op = "New"
	}
	if err != nil {
		return fmt.Errorf("mpi: New: %w", err)
	}
	return nil
}

// hostKey tells hosts apart: the host name and the kernel's boot id.
func hostKey() string {
	h, _ := os.Hostname()
	boot, _ := os.ReadFile("/proc/sys/kernel/random/boot_id")
	return h + "/" + strings.TrimSpace(string(boot))
}

// localRanks computes the local rank and size from the host keys, and
// takes the launcher's local rank where it set one.
func (b *Bootstrap) localRanks() {
	seen := map[string]bool{}
	for r, k := range b.hostKey {
		seen[k] = true
		if k == b.hostKey[b.rank] {
			if r < b.rank {
				b.localRank++
			}
			b.localSize++
		}
	}
	b.hosts = len(seen)
	b.localFrom = "host names"
	if lr, from, ok := LocalRankFromEnv(); ok {
		if lr != b.localRank {
			b.log.Warn("mpi: launcher's local rank differs from the one computed from host names; using the launcher's",
				"rank", b.rank, from, lr, "computed", b.localRank)
		}
		b.localRank, b.localFrom = lr, from
	}
}

// Rank implements team.Bootstrap.
func (b *Bootstrap) Rank() int { return b.rank }

// Size implements team.Bootstrap.
func (b *Bootstrap) Size() int { return b.size }

// InProcess implements team.Bootstrap: false, ranks are processes.
func (b *Bootstrap) InProcess() bool { return false }

// LocalRank is this rank's index among the ranks on its host.
func (b *Bootstrap) LocalRank() int { return b.localRank }

// LocalRankSource says where LocalRank came from: the launcher's
// variable, or "host names".
func (b *Bootstrap) LocalRankSource() string { return b.localFrom }

// LocalSize is the number of ranks on this rank's host.
func (b *Bootstrap) LocalSize() int { return b.localSize }

// Hosts is the number of distinct hosts the ranks run on.
func (b *Bootstrap) Hosts() int { return b.hosts }

// SocketPath is this rank's descriptor socket.
func (b *Bootstrap) SocketPath() string { return b.srv.Path() }

// SocketPaths are every rank's descriptor sockets, by rank.
func (b *Bootstrap) SocketPaths() []string { return slices.Clone(b.paths) }

// Abort ends the whole job (MPI_Abort) with code: for a rank that cannot
// go on and must not leave the others waiting.
func (b *Bootstrap) Abort(code int) { b.comm.Abort(code) }

// withDeadline gives ctx the default timeout when it has no deadline,
// named for deadline.Explain.
func (b *Bootstrap) withDeadline(ctx context.Context) (context.Context, context.CancelFunc) {
	if _, ok := ctx.Deadline(); ok {
		return context.WithCancel(ctx)
	}
	return deadline.WithTimeout(ctx, b.o.timeout, setupDeadline, b.o.timeoutSrc)
}

// setupDeadline is what the errors call the timeout: NVLS_SETUP_TIMEOUT's
// name, as package team calls its own.
const setupDeadline = "setup deadline"

// begin starts a collective: it checks the state and numbers it. A
// context that already ended fails the call before it takes part (and
// before it takes a number), leaving the Bootstrap usable.
func (b *Bootstrap) begin(ctx context.Context, op string) (uint64, error) {
	if b.closed {
		return 0, fmt.Errorf("mpi: rank %d: %s: %w", b.rank, op, team.ErrBootstrapClosed)
	}
	if b.broken != nil {
		return 0, fmt.Errorf("mpi: rank %d: %s: %w: %w", b.rank, op, ErrBroken, b.broken)
	}
	if err := ctx.Err(); err != nil {
		return 0, fmt.Errorf("mpi: rank %d: %s: %w", b.rank, op, err)
	}
	s := b.seq
	b.seq++
	return s, nil
}

// AllGather implements team.Bootstrap.
func (b *Bootstrap) AllGather(ctx context.Context, mine []byte) ([][]byte, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	ctx, cancel := b.withDeadline(ctx)
	defer cancel()
	return b.gather(ctx, "AllGather", mine)
}

// Barrier implements team.Bootstrap.
func (b *Bootstrap) Barrier(ctx context.Context) error {
	b.mu.Lock()
	defer b.mu.Unlock()
	ctx, cancel := b.withDeadline(ctx)
	defer cancel()
	_, err := b.gather(ctx, "Barrier", nil)
	return err
}

// AllGatherFDs implements team.Bootstrap over Unix sockets (fdpass): all
// ranks must run on one host. The returned descriptors are the caller's
// (close-on-exec; this rank's entry is a duplicate of fd).
func (b *Bootstrap) AllGatherFDs(ctx context.Context, fd int) ([]int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	const op = "AllGatherFDs"
	if fd < -1 {
		return nil, fmt.Errorf("mpi: rank %d: %s: invalid fd %d", b.rank, op, fd)
	}
	seq, err := b.begin(ctx, op)
	if err != nil {
		return nil, err
	}
	if b.hosts > 1 {
		err := fmt.Errorf("mpi: rank %d: %s: the ranks run on %d hosts; descriptors pass only within one: %w", b.rank, op, b.hosts, handletype.ErrMultiNode)
		b.broken = err
		return nil, err
	}
	ctx, cancel := b.withDeadline(ctx)
	defer cancel()
	fds, err := b.srv.Exchange(ctx, seq, b.paths, fd)
	if err != nil {
		missing := map[int]bool{}
		var me *fdpass.MissingError
		if errors.As(err, &me) {
			for _, r := range me.Ranks {
				missing[r] = true
			}
		}
		for r := range b.size {
			if r != b.rank && peerFailed(err, r) {
				missing[r] = true
			}
		}
		ranks := make([]int, 0, len(missing))
		for r := range missing {
			ranks = append(ranks, r)
		}
		slices.Sort(ranks)
		err = deadline.Explain(ctx, &team.MissingRanksError{Op: op, Seq: seq, Rank: b.rank, Missing: ranks, Err: err})
		b.broken = err
		return nil, err
	}
	return fds, nil
}

// peerFailed reports whether err holds an *fdpass.PeerError for rank r.
func peerFailed(err error, r int) bool {
	var walk func(error) bool
	walk = func(e error) bool {
		if pe, ok := e.(*fdpass.PeerError); ok && pe.Rank == r {
			return true
		}
		if j, ok := e.(interface{ Unwrap() []error }); ok {
			for _, x := range j.Unwrap() {
				if walk(x) {
					return true
				}
			}
		}
		return false
	}
	return walk(err)
}

// Close implements team.Bootstrap: it closes the descriptor server
// (removing its socket and directory) and, when this is the last open
// Bootstrap and KeepMPI was not given, finalizes MPI. Close is not
// collective, but MPI_Finalize waits for the other ranks (bounded by the
// timeout).
func (b *Bootstrap) Close() error {
	b.mu.Lock()
	if b.closed {
		b.mu.Unlock()
		return nil
	}
	b.closed = true
	b.mu.Unlock()
	return b.release()
}

func (b *Bootstrap) release() error {
	var err error
	if b.srv != nil {
		err = b.srv.Close()
	}
	proc.mu.Lock()
	defer proc.mu.Unlock()
	proc.open--
	if proc.open == 0 && !b.o.keepMPI {
		err = errors.Join(err, finalizeLocked(b.o.timeout))
	}
	return err
}
