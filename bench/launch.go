package main

// The per-rank mode: nvls-bench with one process per GPU, as under
// `mpirun -np N` (the MPI launcher is mpi.go, built with -tags mpi; tests
// run the same mode with one goroutine per rank and an in-process
// bootstrap). Each rank drives the one device of its local rank, brings
// up its rank of the team with team.NewRank, and runs the same sweep as
// one process driving every GPU; where the single process would look at
// every rank's figures, the ranks all-gather them through the bootstrap:
//
//   - the node: each rank's device description (or why it could not open
//     one: every rank then stops, naming the ranks that failed);
//   - after every drain of the streams, a barrier: no rank goes on while a
//     collective of another may still touch its memory;
//   - the timing: each rank times its own stream with CUDA events; the
//     reported time is the slowest rank's (with -timing median, the
//     median over iterations of the slowest rank's time in each), as
//     nccl-tests reports under MPI;
//   - the check: rank 0's seed, so that every rank computes every rank's
//     inputs; then #wrong per rank, summed in the table;
//   - NCCL: rank 0's ncclGetUniqueId to every rank, then ncclCommInitRank.
//
// Every rank ends with the same report; only rank 0 prints the table and
// writes -json and -plot. Other ranks print errors only, each line
// prefixed with "[rank R] ".

import (
	"bytes"
	"context"
	"encoding/binary"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"sync"
	"time"

	"github.com/nvls-go/nvls/cuda"
	"github.com/nvls-go/nvls/nccl"
	"github.com/nvls-go/nvls/team"
)

// rankWorld is one rank of a run with one process per GPU.
type rankWorld struct {
	// boot is how the ranks meet (team/mpi's Bootstrap under mpirun).
	boot team.Bootstrap
	// local is the rank's index among the ranks of its host: the ordinal
	// of its device.
	local int
	// drv is the driver; nil loads the real one. Tests pass one simulated
	// node shared by their in-process ranks (simulated, why).
	drv       cuda.Driver
	simulated bool
	why       string
}

// runRank is run for one rank of a per-rank job. Every rank parses the
// same flags; usage errors and -h are printed by rank 0 only.
func runRank(args []string, w *rankWorld, stdout, stderr io.Writer) int {
	rank := w.boot.Rank()
	quiet := io.Writer(stderr)
	if rank != 0 {
		stdout = io.Discard
		stderr = &prefixWriter{w: stderr, prefix: fmt.Sprintf("[rank %d] ", rank), bol: true}
		quiet = io.Discard
	}
	cfg, err := parseFlags(args, quiet)
	if err != nil {
		if err == errHelp {
			return exitOK
		}
		fprintf(quiet, "nvls-bench: %v\n", err)
		return exitUsage
	}
	if cfg.coll == collGrow {
		fprintf(quiet, "nvls-bench: -coll grow runs on one GPU: run it without mpirun\n")
		return exitUsage
	}
	cfg.rank = w
	if rank != 0 {
		cfg.jsonPath, cfg.plotPath = "", ""
	}
	return bench(cfg, stdout, stderr)
}

// prefixWriter starts every line with prefix.
type prefixWriter struct {
	mu     sync.Mutex
	w      io.Writer
	prefix string
	bol    bool // at the beginning of a line
}

func (p *prefixWriter) Write(b []byte) (int, error) {
	p.mu.Lock()
	defer p.mu.Unlock()
	var out bytes.Buffer
	for _, c := range b {
		if p.bol {
			out.WriteString(p.prefix)
		}
		out.WriteByte(c)
		p.bol = c == '\n'
	}
	if _, err := p.w.Write(out.Bytes()); err != nil {
		return 0, err
	}
	return len(b), nil
}

// openRankNode opens this rank's device and learns every rank's. When
// any rank fails, every rank returns an error naming the ones that did.
func openRankNode(cfg *config) (*node, error) {
	w := cfg.rank
	n := &node{boot: w.boot, timeout: cfg.timeout, drv: w.drv, simulated: w.simulated, why: w.why}
	ctx, cancel := context.WithTimeout(context.Background(), cfg.timeout)
	defer cancel()
	g, err := n.setupRank(cfg)
	var mine []byte
	if err == nil {
		mine, err = json.Marshal(g)
	}
	all, aerr := n.agree(ctx, "opening the GPUs", mine, err)
	if aerr == nil {
		n.machine.GPUs = make([]GPU, len(all))
		for r, m := range all {
			if err := json.Unmarshal(m, &n.machine.GPUs[r]); err != nil {
				aerr = fmt.Errorf("rank %d's GPU: %w", r, err)
				break
			}
		}
	}
	if aerr != nil {
		_ = n.Close()
		return nil, aerr
	}
	return n, nil
}

// setupRank opens the rank's device, its context and stream, and
// describes it.
func (n *node) setupRank(cfg *config) (GPU, error) {
	w := cfg.rank
	size := w.boot.Size()
	if cfg.gpus != 0 && cfg.gpus != size {
		return GPU{}, &flagError{"g", fmt.Sprint(cfg.gpus), fmt.Sprintf("under mpirun every rank is one GPU: -g must be the number of ranks (%d) or left out", size)}
	}
	if n.drv == nil {
		if cfg.sim {
			return GPU{}, errors.New("-sim: under mpirun every rank is a process, and processes cannot share the simulated node: run nvls-bench -sim without mpirun")
		}
		lib, err := cuda.Load()
		if err != nil {
			if errors.Is(err, cuda.ErrNoDriver) {
				return GPU{}, fmt.Errorf("under mpirun every rank needs a GPU (the simulated node cannot be shared between processes): %w", err)
			}
			return GPU{}, fmt.Errorf("loading the CUDA driver: %w", err)
		}
		n.drv = guard(lib, cfg)
	}
	d := n.drv
	if err := d.Init(); err != nil {
		return GPU{}, fmt.Errorf("cuInit: %w", err)
	}
	count, err := d.DeviceCount()
	if err != nil {
		return GPU{}, fmt.Errorf("device count: %w", err)
	}
	host, _ := os.Hostname()
	if w.local < 0 || w.local >= count {
		return GPU{}, fmt.Errorf("local rank %d on %s: no GPU of its own (%d visible)", w.local, host, count)
	}
	ver, err := d.DriverVersion()
	if err != nil {
		return GPU{}, fmt.Errorf("driver version: %w", err)
	}
	n.machine = Machine{Hostname: host, Driver: d.Name(), Simulated: n.simulated, DriverVersion: ver}
	if n.simulated {
		n.machine.SimulatedWhy = n.why
	}
	dev, err := d.DeviceGet(w.local)
	if err != nil {
		return GPU{}, fmt.Errorf("device %d: %w", w.local, err)
	}
	g, err := describeGPU(d, dev, w.boot.Rank(), w.local)
	if err != nil {
		return GPU{}, err
	}
	g.Host, g.Pid = host, os.Getpid()
	c, err := d.PrimaryCtxRetain(dev)
	if err != nil {
		return GPU{}, fmt.Errorf("device %d: retaining its primary context: %w", w.local, err)
	}
	n.devs, n.ctxs = []cuda.Device{dev}, []cuda.Context{c}
	err = n.each(func(r int) error {
		s, err := d.StreamCreate(cuda.StreamNonBlocking)
		if err != nil {
			return fmt.Errorf("device %d: creating a stream: %w", w.local, err)
		}
		n.streams = append(n.streams, s)
		return nil
	})
	return g, err
}

// ranks is the number of ranks of the job (every GPU of the run).
func (n *node) ranks() int {
	if n.boot != nil {
		return n.boot.Size()
	}
	return n.size()
}

// rank is the job rank of local rank r.
func (n *node) rank(r int) int {
	if n.boot != nil {
		return n.boot.Rank() + r
	}
	return r
}

// leader reports whether this process prints the report.
func (n *node) leader() bool { return n.boot == nil || n.boot.Rank() == 0 }

// newTeam brings up the team: over every GPU of the node, or this
// process's rank of it.
func (n *node) newTeam(ctx context.Context, opts ...team.Option) (*team.Team, error) {
	if n.boot == nil {
		return team.New(ctx, n.drv, n.devs, opts...)
	}
	return team.NewRank(ctx, n.drv, n.devs[0], n.boot, opts...)
}

// agree all-gathers every rank's outcome of a step: its payload, or its
// error. When any rank failed, every rank returns an error naming each
// failed rank (this rank's own error first, matchable with errors.Is and
// errors.As; ranks that failed with the same message are named together).
func (n *node) agree(ctx context.Context, step string, mine []byte, failed error) ([][]byte, error) {
	msg := append([]byte{0}, mine...)
	if failed != nil {
		msg = append([]byte{1}, failed.Error()...)
	}
	all, err := n.boot.AllGather(ctx, msg)
	if err != nil {
		return nil, errors.Join(failed, fmt.Errorf("%s: %w", step, err))
	}
	me := n.boot.Rank()
	var order []string          // distinct messages of other ranks, in rank order
	byMsg := map[string][]int{} // message -> ranks
	out := make([][]byte, len(all))
	for r, m := range all {
		switch {
		case len(m) == 0:
			m = []byte("\x01empty message")
			fallthrough
		case m[0] != 0:
			if r == me {
				continue
			}
			k := string(m[1:])
			if _, ok := byMsg[k]; !ok {
				order = append(order, k)
			}
			byMsg[k] = append(byMsg[k], r)
		default:
			out[r] = m[1:]
		}
	}
	if failed == nil && len(order) == 0 {
		return out, nil
	}
	var errs []error
	if failed != nil {
		errs = append(errs, fmt.Errorf("rank %d: %w", me, failed))
	}
	for _, k := range order {
		ranks := byMsg[k]
		if failed != nil && k == failed.Error() {
			errs = append(errs, fmt.Errorf("%s: rank(s) %v failed the same way", step, ranks))
			continue
		}
		errs = append(errs, fmt.Errorf("%s: rank(s) %v: %s", step, ranks, k))
	}
	return nil, errors.Join(errs...)
}

// settle ends a step that may fail on some ranks: under mpirun every
// rank learns whether every rank's step went well, and returns an error
// naming the ranks whose step failed (its own error first). When this
// process drives every rank it returns err.
func (n *node) settle(ctx context.Context, step string, err error) error {
	if n.boot == nil {
		return err
	}
	_, aerr := n.agree(ctx, step, nil, err)
	return aerr
}

// sync waits for every rank's process (a bootstrap barrier); nothing to
// do when this process drives every rank.
func (n *node) sync(ctx context.Context, what string) error {
	if n.boot == nil {
		return nil
	}
	if err := n.boot.Barrier(ctx); err != nil {
		return fmt.Errorf("%s: waiting for the other ranks: %w", what, err)
	}
	return nil
}

// sharedSeed is rank 0's seed on every rank (mine when this process
// drives every rank).
func (n *node) sharedSeed(ctx context.Context, mine uint64) (uint64, error) {
	if n.boot == nil {
		return mine, nil
	}
	var b []byte
	if n.boot.Rank() == 0 {
		b = binary.LittleEndian.AppendUint64(nil, mine)
	}
	all, err := n.boot.AllGather(ctx, b)
	if err != nil {
		return 0, fmt.Errorf("check: rank 0's seed: %w", err)
	}
	if len(all[0]) != 8 {
		return 0, fmt.Errorf("check: rank 0's seed is %d bytes", len(all[0]))
	}
	return binary.LittleEndian.Uint64(all[0]), nil
}

// gatherTimes replaces this process's figures with the job's: every
// rank's own time (rankTimesUS, by rank) and, per iteration, the slowest
// rank's (iterTimesUS).
func (n *node) gatherTimes(ctx context.Context, m *measurement) error {
	if n.boot == nil {
		return nil
	}
	all, err := n.boot.AllGather(ctx, appendFloats(appendFloats(nil, m.rankTimesUS), m.iterTimesUS))
	if err != nil {
		return fmt.Errorf("gathering the times: %w", err)
	}
	var ranks, iters []float64
	for r, b := range all {
		rt, rest, err1 := readFloats(b)
		it, rest, err2 := readFloats(rest)
		if err := errors.Join(err1, err2); err != nil || len(rest) != 0 || len(it) != len(m.iterTimesUS) {
			return fmt.Errorf("gathering the times: rank %d sent %d bytes that do not parse as %d iteration times: %v", r, len(b), len(m.iterTimesUS), err)
		}
		ranks = append(ranks, rt...)
		if iters == nil && it != nil {
			iters = make([]float64, len(it))
		}
		for i, x := range it {
			iters[i] = math.Max(iters[i], x)
		}
	}
	m.rankTimesUS, m.iterTimesUS = ranks, iters
	return nil
}

// gatherCheck replaces this process's check counts with the job's: the
// wrong elements of every rank (by rank) and the largest error of any.
func (n *node) gatherCheck(ctx context.Context, c *checkResult) error {
	if n.boot == nil {
		return nil
	}
	w := make([]float64, len(c.wrongPerRank))
	for i, x := range c.wrongPerRank {
		w[i] = float64(x) // exact: counts of elements stay far below 2^53
	}
	all, err := n.boot.AllGather(ctx, appendFloats(appendFloats(nil, w), []float64{c.maxErr}))
	if err != nil {
		return fmt.Errorf("gathering the check: %w", err)
	}
	c.wrongPerRank = c.wrongPerRank[:0]
	for r, b := range all {
		ws, rest, err1 := readFloats(b)
		me, rest, err2 := readFloats(rest)
		if err := errors.Join(err1, err2); err != nil || len(rest) != 0 || len(me) != 1 {
			return fmt.Errorf("gathering the check: rank %d sent %d bytes that do not parse: %v", r, len(b), err)
		}
		for _, x := range ws {
			c.wrongPerRank = append(c.wrongPerRank, int64(x))
		}
		c.maxErr = math.Max(c.maxErr, me[0])
	}
	return nil
}

// appendFloats appends a count and the float64s.
func appendFloats(b []byte, xs []float64) []byte {
	b = binary.LittleEndian.AppendUint32(b, uint32(len(xs)))
	for _, x := range xs {
		b = binary.LittleEndian.AppendUint64(b, math.Float64bits(x))
	}
	return b
}

// readFloats reads what appendFloats wrote.
func readFloats(b []byte) ([]float64, []byte, error) {
	if len(b) < 4 {
		return nil, nil, errors.New("short message")
	}
	k := int(binary.LittleEndian.Uint32(b))
	b = b[4:]
	if k > len(b)/8 {
		return nil, nil, fmt.Errorf("%d values in %d bytes", k, len(b))
	}
	var xs []float64
	for i := range k {
		xs = append(xs, math.Float64frombits(binary.LittleEndian.Uint64(b[8*i:])))
	}
	return xs, b[8*k:], nil
}

// ncclCommsRank makes this rank's NCCL communicator: rank 0's
// ncclGetUniqueId goes to every rank through the bootstrap, then every
// rank calls ncclCommInitRank (which waits for all of them; NCCL itself
// sets no deadline on it).
func (n *node) ncclCommsRank(lib *nccl.Lib) ([]nccl.Comm, error) {
	ctx, cancel := context.WithTimeout(context.Background(), n.setupTimeout())
	defer cancel()
	var mine []byte
	var idErr error
	if n.boot.Rank() == 0 {
		var id nccl.UniqueID
		idErr = n.on(0, func() (err error) {
			id, err = lib.GetUniqueID()
			return err
		})
		mine = id.Internal[:]
	}
	all, err := n.agree(ctx, "NCCL's unique id", mine, idErr)
	if err != nil {
		return nil, err
	}
	var id nccl.UniqueID
	if len(all[0]) != len(id.Internal) {
		return nil, fmt.Errorf("NCCL's unique id from rank 0: %d bytes, want %d", len(all[0]), len(id.Internal))
	}
	copy(id.Internal[:], all[0])
	var c nccl.Comm
	err = n.on(0, func() (err error) {
		c, err = lib.CommInitRank(n.ranks(), id, n.rank(0))
		return err
	})
	if err != nil {
		return nil, fmt.Errorf("rank %d: %w", n.rank(0), err)
	}
	return []nccl.Comm{c}, nil
}

// setupTimeout bounds the per-rank setup steps outside the sweep's own
// contexts.
func (n *node) setupTimeout() time.Duration {
	if n.timeout > 0 {
		return n.timeout
	}
	return defTimeout
}
