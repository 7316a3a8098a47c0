package main

// The per-rank world: nvls-bench with one process per GPU, as under
// `mpirun -np N` (the MPI launcher is mpi.go, built with -tags mpi; tests
// run the same world with one goroutine per rank and an in-process
// bootstrap). Each rank drives the one device of its local rank, brings
// up its rank of the team with team.NewRank, and runs the same sweep as
// one process driving every GPU; where that process would look at every
// rank's figures, the ranks all-gather them through the bootstrap
// (exchange.go):
//
//   - the node: each rank's device description (or why it could not open
//     one: every rank then stops, naming the ranks that failed);
//   - after every drain of the streams, a barrier: no rank goes on while a
//     collective of another may still touch its memory;
//   - the timing: each rank times its own stream with CUDA events; the
//     report aggregates every rank's times (-a), as nccl-tests reports
//     under MPI;
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
	"errors"
	"fmt"
	"io"
	"os"
	"sync"

	"github.com/nvls-go/nvls/bench/internal/cli"
	"github.com/nvls-go/nvls/cuda"
	"github.com/nvls-go/nvls/nccl"
	"github.com/nvls-go/nvls/team"
)

// perRank is the world of one rank per process.
type perRank struct {
	// boot is how the ranks meet (team/mpi's Bootstrap under mpirun).
	boot team.Bootstrap
	// local is the rank's index among the ranks of its host: the ordinal
	// of its device.
	local int
	// shared is the driver every rank uses; nil loads the real one. Tests
	// pass one simulated node shared by their in-process ranks.
	shared *cli.Backend
}

// runRank is run for one rank of a per-rank job. Every rank parses the
// same flags; usage errors and -h are printed by rank 0 only.
func runRank(args []string, w *perRank, stdout, stderr io.Writer) int {
	if rank := w.boot.Rank(); rank != 0 {
		prefixed := &prefixWriter{w: stderr, prefix: fmt.Sprintf("[rank %d] ", rank), bol: true}
		return runIn(w, args, io.Discard, prefixed, io.Discard)
	}
	return runIn(w, args, stdout, stderr, stderr)
}

// open loads the real driver: processes cannot share the simulated node.
func (w *perRank) open(cfg *config) (*cli.Backend, error) {
	if w.shared != nil {
		return w.shared, nil
	}
	if cfg.sim {
		return nil, errors.New("-sim: under mpirun every rank is a process, and processes cannot share the simulated node: run nvls-bench -sim without mpirun")
	}
	lib, err := cuda.Load()
	if err != nil {
		if errors.Is(err, cuda.ErrNoDriver) {
			return nil, fmt.Errorf("under mpirun every rank needs a GPU (the simulated node cannot be shared between processes): %w", err)
		}
		return nil, fmt.Errorf("loading the CUDA driver: %w", err)
	}
	return &cli.Backend{Driver: guard(lib, cfg)}, nil
}

// devices is the GPU of the rank's local rank.
func (w *perRank) devices(cfg *config, count int) ([]int, error) {
	if cfg.ranks != 0 {
		return nil, &flagError{"ranks", fmt.Sprint(cfg.ranks), "under mpirun every rank is a process with a GPU of its own: -ranks does not apply (ranks on fewer GPUs: nvls-bench -ranks N without mpirun)"}
	}
	if size := w.boot.Size(); cfg.gpus != 0 && cfg.gpus != size {
		return nil, &flagError{"g", fmt.Sprint(cfg.gpus), fmt.Sprintf("under mpirun every rank is one GPU: -g must be the number of ranks (%d) or left out", size)}
	}
	if w.local < 0 || w.local >= count {
		host, _ := os.Hostname()
		return nil, fmt.Errorf("local rank %d on %s: no GPU of its own (%d visible)", w.local, host, count)
	}
	return []int{w.local}, nil
}

func (w *perRank) newTeam(ctx context.Context, drv cuda.Driver, devs []cuda.Device, opts ...team.Option) (*team.Team, error) {
	return team.NewRank(ctx, drv, devs[0], w.boot, opts...)
}

// ncclComms makes this rank's NCCL communicator: rank 0's
// ncclGetUniqueId goes to every rank through the bootstrap, then every
// rank calls ncclCommInitRank (which waits for all of them; NCCL itself
// sets no deadline on it).
func (w *perRank) ncclComms(n *node, lib *nccl.Lib) ([]nccl.Comm, error) {
	ctx, cancel := context.WithTimeout(context.Background(), n.setupTimeout())
	defer cancel()
	var mine []byte
	var idErr error
	if n.leader() {
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

func (w *perRank) allGather(ctx context.Context, msg []byte) ([][]byte, error) {
	return w.boot.AllGather(ctx, msg)
}

func (w *perRank) barrier(ctx context.Context) error { return w.boot.Barrier(ctx) }
func (w *perRank) proc() int                         { return w.boot.Rank() }

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
