package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/nvls-go/nvls/bench/internal/cli"
	"github.com/nvls-go/nvls/internal/kabi"
	"github.com/nvls-go/nvls/kernels"
)

// Defaults.
const (
	defMinBytes    = 8
	defMaxBytes    = 128 << 20 // nccl-tests' usual "-b 8 -e 128M -f 2"
	defSimMaxBytes = 1 << 20   // the simulated node runs kernels in Go
	defSimGPUs     = 4
	defTimeout     = 2 * time.Minute
)

// config is the parsed command line.
type config struct {
	args []string

	minBytes, maxBytes uint64
	stepFactor         uint64
	iters, warmup      int
	aggIters           int     // -m: collectives per iteration
	checkIters         int     // -c: checked runs per size and variant (0: none)
	graphLaunches      int     // -G: replays of the captured iterations (0: no graph)
	graph              bool    // -graph: -G 1
	coldGraph          bool    // -cold-graph: time the graph's first launch (no untimed replay first)
	average            average // -a: how the ranks' times make one
	blocking           bool    // -z 1: wait for every collective, host-timed (latency.go)
	gpus               int     // 0: all
	ranks              int     // -ranks: 0 is one per GPU; more share the GPUs
	roofline           bool    // -roofline: measure the copy roofline (default: with shared GPUs)
	dtype              kernels.DType
	op                 kernels.RedOp
	root               int
	coll               *collective
	transport          string
	compare            string // "" or "nccl"
	jsonPath           string
	plotPath           string
	sim                bool
	timing             string // "avg" or "median"
	segment            int    // -segment: iterations a timed segment with -timing median
	launch             string // -launch: "serial" (one thread launches every GPU's graph in turn), "parallel" or "workers"
	timeout            time.Duration

	// set records the flags given on the command line.
	set map[string]bool
}

var errHelp = errors.New("help requested")

// flagError is a bad value for a flag: "-d float64: unknown dtype (allowed: ...)".
type flagError struct {
	flag, value, msg string
}

func (e *flagError) Error() string { return fmt.Sprintf("-%s %s: %s", e.flag, e.value, e.msg) }

// flags is the flag set being built; first keeps the first bad value, in
// our words (the flag package's own would be less clear).
type flags struct {
	fs    *flag.FlagSet
	first error
}

func (p *flags) bad(name, v, format string, a ...any) error {
	err := &flagError{flag: name, value: v, msg: fmt.Sprintf(format, a...)}
	if p.first == nil {
		p.first = err
	}
	return err
}

func (p *flags) fn(name string, set func(v string) error) { p.fs.Func(name, "", set) }

func (p *flags) size(name string, dst *uint64) {
	p.fn(name, func(v string) error {
		n, err := cli.ParseSize(v)
		if err != nil {
			return p.bad(name, v, "%v", err)
		}
		*dst = n
		return nil
	})
}

func (p *flags) int(name string, dst *int, lo, hi int, what string) {
	p.fn(name, func(v string) error {
		n, err := strconv.Atoi(strings.TrimSpace(v))
		if err != nil {
			return p.bad(name, v, "not an integer (%s)", what)
		}
		if n < lo || n > hi {
			return p.bad(name, v, "out of range (%s)", what)
		}
		*dst = n
		return nil
	})
}

func (p *flags) bool(name string, dst *bool) {
	p.fs.BoolFunc(name, "", func(v string) error {
		b, err := strconv.ParseBool(v)
		if err != nil {
			return p.bad(name, v, "not a boolean")
		}
		*dst = b
		return nil
	})
}

func (p *flags) choice(name string, dst *string, choices ...string) {
	p.fn(name, func(v string) error {
		for _, c := range choices {
			if strings.EqualFold(v, c) {
				*dst = c
				return nil
			}
		}
		return p.bad(name, v, "unknown %s (allowed: %s)", name, strings.Join(choices, ", "))
	})
}

func parseFlags(args []string, stderr io.Writer) (*config, error) {
	cfg := &config{
		args:       append([]string(nil), args...),
		minBytes:   defMinBytes,
		maxBytes:   defMaxBytes,
		stepFactor: 2,
		iters:      20,
		warmup:     5,
		aggIters:   1,
		checkIters: 1,
		average:    avgMax,
		dtype:      kernels.F32,
		op:         kernels.Sum,
		coll:       collAllReduce,
		transport:  "auto",
		timing:     "avg",
		segment:    1,
		launch:     "serial",
		timeout:    defTimeout,
		set:        map[string]bool{},
	}
	p := &flags{fs: flag.NewFlagSet("nvls-bench", flag.ContinueOnError)}
	p.fs.SetOutput(io.Discard)
	p.ncclTestsFlags(cfg)
	p.ownFlags(cfg)
	p.foreignFlags()
	err := p.fs.Parse(args)
	p.fs.Visit(func(f *flag.Flag) { cfg.set[f.Name] = true })
	if err := p.result(err, stderr); err != nil {
		return nil, err
	}
	if p.fs.NArg() > 0 {
		return nil, fmt.Errorf("%q: unexpected argument (flags only; run nvls-bench -h)", p.fs.Arg(0))
	}
	if cfg.compare == "none" {
		cfg.compare = ""
	}
	if err := cfg.resolveGraph(); err != nil {
		return nil, err
	}
	return cfg, cfg.validate()
}

// result turns the flag package's outcome into ours.
func (p *flags) result(err error, stderr io.Writer) error {
	switch {
	case errors.Is(err, flag.ErrHelp):
		fmt.Fprint(stderr, usage)
		return errHelp
	case p.first != nil:
		return p.first
	case err == nil:
		return nil
	}
	return cli.FlagParseError("nvls-bench", err)
}

// ncclTestsFlags are the flags nccl-tests has, with its meanings.
func (p *flags) ncclTestsFlags(cfg *config) {
	p.size("b", &cfg.minBytes)
	p.size("e", &cfg.maxBytes)
	p.fn("f", func(v string) error {
		n, err := strconv.ParseUint(strings.TrimSpace(v), 10, 64)
		if err != nil || n < 2 {
			return p.bad("f", v, "step factor must be an integer >= 2")
		}
		cfg.stepFactor = n
		return nil
	})
	p.int("n", &cfg.iters, 1, 1<<24, "timed iterations: an integer >= 1")
	p.int("w", &cfg.warmup, 0, 1<<24, "warm-up iterations: an integer >= 0")
	p.int("m", &cfg.aggIters, 1, 1<<16, "collectives per iteration: an integer >= 1")
	p.int("c", &cfg.checkIters, 0, 1<<16, "checked runs: 0 (no check) or more")
	p.int("G", &cfg.graphLaunches, 0, 1<<24, "CUDA graph replays: 0 (no graph) or more")
	p.fn("a", func(v string) error {
		n, err := strconv.Atoi(strings.TrimSpace(v))
		if err != nil || n < 0 || n >= len(averageNames) {
			return p.bad("a", v, "must be 0 (rank 0), 1 (mean over the ranks), 2 (fastest rank) or 3 (slowest rank)")
		}
		cfg.average = average(n)
		return nil
	})
	p.fn("z", func(v string) error {
		switch strings.TrimSpace(v) {
		case "0", "1":
			cfg.blocking = strings.TrimSpace(v) == "1"
			return nil
		}
		return p.bad("z", v, "blocking must be 0 or 1")
	})
	p.int("g", &cfg.gpus, 1, kabi.MaxRanks, fmt.Sprintf("GPUs: 1 to %d", kabi.MaxRanks))
	p.fn("d", func(v string) error {
		t, err := kernels.ParseDType(v)
		if err != nil {
			return p.bad("d", v, "unknown dtype (allowed: %s)", strings.Join(kernels.DTypeSpellings(), ", "))
		}
		cfg.dtype = t
		return nil
	})
	p.fn("o", func(v string) error {
		o, err := kernels.ParseRedOp(v)
		if err != nil {
			return p.bad("o", v, "unknown op (allowed: sum, min, max)")
		}
		cfg.op = o
		return nil
	})
	p.int("r", &cfg.root, 0, kabi.MaxRanks-1, fmt.Sprintf("root rank: 0 to %d, below -g", kabi.MaxRanks-1))
}

// ownFlags are nvls-bench's own.
func (p *flags) ownFlags(cfg *config) {
	p.fn("coll", func(v string) error {
		if strings.EqualFold(strings.TrimSpace(v), "grow") {
			return p.bad("coll", v, "the VMM growth experiment is its own command now: nvls-grow (go build -o bin/nvls-grow ./bench/nvls-grow)")
		}
		if cfg.coll = collByName(v); cfg.coll == nil {
			return p.bad("coll", v, "unknown collective (allowed: %s)", collNames())
		}
		return nil
	})
	p.choice("transport", &cfg.transport, "auto", "multicast", "unicast")
	p.bool("graph", &cfg.graph)
	p.bool("cold-graph", &cfg.coldGraph)
	p.choice("compare", &cfg.compare, "nccl", "none")
	p.fn("json", func(v string) error {
		if v == "" {
			return p.bad("json", `""`, "empty file name")
		}
		cfg.jsonPath = v
		return nil
	})
	p.fn("plot", func(v string) error {
		switch strings.ToLower(filepath.Ext(v)) {
		case ".svg", ".png":
			cfg.plotPath = v
			return nil
		}
		return p.bad("plot", v, "unknown plot format (allowed: a file name ending in .svg or .png)")
	})
	p.bool("sim", &cfg.sim)
	p.int("ranks", &cfg.ranks, 1, kabi.MaxRanks, fmt.Sprintf("ranks: 1 to %d, spread over the GPUs (-g)", kabi.MaxRanks))
	p.bool("roofline", &cfg.roofline)
	p.choice("timing", &cfg.timing, "avg", "median")
	p.int("segment", &cfg.segment, 1, 1<<24, "iterations a timed segment: an integer >= 1")
	p.choice("launch", &cfg.launch, "serial", "parallel", "workers")
	p.fn("timeout", func(v string) error {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			return p.bad("timeout", v, "not a positive duration (e.g. 30s, 2m)")
		}
		cfg.timeout = d
		return nil
	})
}

// foreignFlags are nccl-tests' flags that do not apply here: each is
// refused (saying why) unless it asks for what nvls-bench does anyway.
var foreignFlags = []struct {
	name, same, why string
}{
	{"t", "1", "nvls-bench has no threads per process: one process drives every GPU (-g), or mpirun starts one process per GPU"},
	{"p", "0", "nvls-bench has no threads to initialize NCCL in parallel"},
	{"y", "0", "every rank runs on a stream of its own; the NULL stream is not used"},
	{"C", "0", "times are CUDA event times on every rank's stream; CPU time is not reported"},
	{"i", "", "sizes grow by a factor (-f) only, not by fixed increments"},
	{"T", "", "nvls-bench's deadline is -timeout, a duration (e.g. -timeout 30s)"},
	{"F", "", "nvls-bench writes no CSV: -json FILE writes every figure"},
}

func (p *flags) foreignFlags() {
	for _, f := range foreignFlags {
		p.fn(f.name, func(v string) error {
			if f.same != "" && strings.TrimSpace(v) == f.same {
				return nil
			}
			return p.bad(f.name, v, "nccl-tests' flag does not apply: %s", f.why)
		})
	}
}

// validate checks what single flags cannot: how they combine.
func (c *config) validate() error {
	if c.minBytes > c.maxBytes {
		return fmt.Errorf("-b %d, -e %d: the smallest size is larger than the largest", c.minBytes, c.maxBytes)
	}
	if err := c.validateRanks(); err != nil {
		return err
	}
	if !c.coll.Reduces && c.set["o"] {
		return &flagError{"o", c.op.String(), fmt.Sprintf("-coll %s takes no reduction op", c.coll.Name)}
	}
	if err := c.validateData(); err != nil {
		return err
	}
	if c.compare != "" && c.coll.nccl == nil {
		return &flagError{"compare", c.compare, fmt.Sprintf("NCCL has no %s to compare with", c.coll.Name)}
	}
	if c.compare != "" && c.sim {
		return &flagError{"compare", c.compare, noNCCLOnSim + " (-sim)"}
	}
	return c.validateTiming()
}

// validateRanks checks -ranks and -r against -g, and what cannot run
// with ranks that share a GPU (as far as the flags tell: how many GPUs
// there are is known once they are opened; sweep checks again then).
func (c *config) validateRanks() error {
	if c.set["g"] && c.set["ranks"] && c.ranks < c.gpus {
		return &flagError{"ranks", strconv.Itoa(c.ranks), fmt.Sprintf("fewer ranks than GPUs (-g %d): every GPU runs at least one rank (give -g %d, or leave -ranks out)", c.gpus, c.ranks)}
	}
	if c.set["r"] {
		n, what := 0, ""
		switch {
		case c.set["ranks"]:
			n, what = c.ranks, "-ranks"
		case c.set["g"]:
			n, what = c.gpus, "-g"
		}
		if n > 0 && c.root >= n {
			return &flagError{"r", strconv.Itoa(c.root), fmt.Sprintf("root out of range (0 to %d with %s %d)", n-1, what, n)}
		}
	}
	if c.set["roofline"] && c.roofline && !c.coll.Moves {
		return &flagError{"roofline", "true", fmt.Sprintf("-coll %s moves no data: there is no bandwidth to compare with the copy roofline", c.coll.Name)}
	}
	if !c.set["g"] || !c.set["ranks"] || c.ranks == c.gpus {
		return nil
	}
	shared := fmt.Sprintf("-ranks %d on -g %d: ranks share GPUs", c.ranks, c.gpus)
	if c.compare == "nccl" {
		return &flagError{"compare", c.compare, shared + ", and " + noNCCLShared}
	}
	if c.transport == "multicast" {
		return &flagError{"transport", c.transport, shared + ", and a GPU joins a multicast object once: ranks that share GPUs are unicast"}
	}
	return nil
}

// validateData refuses what needs data of a collective that moves none.
func (c *config) validateData() error {
	if c.coll.Moves {
		return nil
	}
	what := fmt.Sprintf("-coll %s moves no data", c.coll.Name)
	switch {
	case c.set["d"]:
		return &flagError{"d", c.dtype.NCCLName(), what + ": it takes no dtype"}
	case c.plotPath != "":
		return &flagError{"plot", c.plotPath, fmt.Sprintf("-coll %s has no sizes to plot against (use -json)", c.coll.Name)}
	case c.set["c"] && c.checkIters > 0:
		return &flagError{"c", strconv.Itoa(c.checkIters), what + ": there is nothing to check (leave -c out)"}
	}
	return nil
}

// resolveGraph makes -graph and -G one setting (-graph is -G 1).
func (c *config) resolveGraph() error {
	switch {
	case c.set["graph"] && c.set["G"] && c.graphLaunches != boolInt(c.graph):
		return &flagError{"G", strconv.Itoa(c.graphLaunches), "-graph is -G 1: give one of them"}
	case c.set["graph"]:
		c.graphLaunches = boolInt(c.graph)
	}
	c.graph = c.graphLaunches > 0
	return nil
}

// validateTiming refuses the timing flags that exclude each other.
func (c *config) validateTiming() error {
	if c.blocking && c.graphLaunches > 0 {
		return &flagError{"z", "1", "-z 1 waits for every collective to finish, and a CUDA graph (-G, -graph) only records collectives to run later: give one of them"}
	}
	if c.blocking && c.aggIters > 1 {
		return &flagError{"z", "1", fmt.Sprintf("-z 1 waits for every collective to finish, and -m %d issues its collectives together (one NCCL group): give one of them", c.aggIters)}
	}
	if c.segment > 1 {
		v := strconv.Itoa(c.segment)
		switch {
		case c.timing != "median":
			return &flagError{"segment", v, "segments are what -timing median takes the median of: give -timing median"}
		case c.blocking:
			return &flagError{"segment", v, "-z 1 times every collective on the host: it has no segments"}
		case c.iters%c.segment != 0:
			return &flagError{"segment", v, fmt.Sprintf("-n %d is not a whole number of segments of %d iterations", c.iters, c.segment)}
		}
	}
	return nil
}

func boolInt(b bool) int {
	if b {
		return 1
	}
	return 0
}

// sizes is the sweep: minBytes, times stepFactor, up to maxBytes, each
// rounded down to a whole number of elements (sizes that hold no element
// are left out).
func (c *config) sizes(elemSize uint64) []uint64 {
	var out []uint64
	for s := c.minBytes; s <= c.maxBytes; {
		r := s / elemSize * elemSize
		if r > 0 && (len(out) == 0 || out[len(out)-1] != r) {
			out = append(out, r)
		}
		if s > c.maxBytes/c.stepFactor {
			break
		}
		if s == 0 {
			s = 1
			continue
		}
		s *= c.stepFactor
	}
	return out
}

const usage = `Usage: nvls-bench [flags]

Flags as in nccl-tests:
  -b size       smallest size in bytes (default 8; K, M, G suffixes = powers of 1024)
  -e size       largest size (default 128M; 1M on the simulated node unless given)
  -f factor     size multiplication factor (default 2)
  -n iters      timed iterations per size (default 20)
  -w iters      warm-up iterations per size (default 5)
  -m agg        collectives per iteration, issued together (NCCL: one group) (default 1)
  -c checks     checked runs per size and variant, each on fresh data (default 1; 0: none)
  -G launches   capture the timed iterations into one CUDA graph per GPU and replay
                it this many times (default 0: no graph)
  -a 0|1|2|3    the time of the ranks reported: 0 rank 0's, 1 their mean, 2 the
                fastest's, 3 the slowest's (default 3; nccl-tests' default is 1)
  -z 0|1        1: the latency mode: wait for every collective to finish before issuing
                the next (nvls: Comm.Sync; NCCL: a stream-query spin) and report the
                host time of issue + wait per collective, as nccl-tests does (default 0)
  -g gpus       number of GPUs (default: all; the simulated node has 4)
  -d type       float|half|bfloat16|int32|uint32|uint64 (or f32|f16|bf16|s32|u32|u64)
  -o op         sum|min|max (default sum; allreduce only)
  -r root       broadcast root rank (default 0)

nvls-bench's own:
  -coll c       allreduce|broadcast|barrier|reducescatter|allgather|reduce
                (default allreduce)
  -transport t  auto|multicast|unicast (default auto)
  -graph        -G 1
  -compare nccl also run NCCL (libnccl.so.2) on the same buffers; ratio = NCCL time / ours
                (on the simulated node, where NCCL cannot run, the header says so); where
                the NCCL (2.27.3+) has symmetric kernels for the collective, a second NCCL
                column runs it on symmetric memory (ncclMemAlloc, NCCL_WIN_COLL_SYMMETRIC)
  -timing m     avg (nccl-tests' way, default) or median (of per-iteration timings)
  -segment k    with -timing median: the median of segments of k iterations each, one
                average per segment (default 1); -n must be a multiple of k. A
                stall of the host inside one segment then moves no figure, where
                it moves -timing avg's by its length / -n
  -launch m     serial (default, as nccl-tests: one thread launches every GPU's graph in
                turn), parallel (a thread per GPU launches its own at once, woken for
                each replay) or workers (each GPU's graph launched on that GPU's team
                worker, team.Run: a thread per GPU that spins between jobs); one
                process driving several GPUs with graphs only
  -cold-graph   time each graph's first launch, which uploads it to the GPU, as nccl-tests
                does (default: one untimed replay first, so that the timed launches are
                replays, as in a program that captures once and replays)
  -json FILE    write every figure as JSON
  -plot FILE    plot busbw and time against size (.svg or .png)
  -sim          run on the simulated NVSwitch node (not hardware times)
  -ranks n      run n ranks on the GPUs (-g; default: all, up to n), rank r on GPU r mod -g:
                with fewer GPUs than ranks, ranks share GPUs (development and testing:
                they share the GPU's SMs and memory, their peer accesses are local; the
                header and the JSON say so; unicast; no -compare nccl)
  -roofline     measure each GPU's copy roofline (cuMemcpyDtoD of 256 MiB, bytes read +
                written) and give every row's bandwidth as a fraction of it (the fewest
                bytes the collective must move / time); on by default when ranks share GPUs
  -timeout d    limit for any one wait (default 2m)

nccl-tests' -t 1, -p 0, -y 0 and -C 0 are accepted (nvls-bench does that anyway);
their other values, -i, -T and -F are refused, saying why.
The VMM growth experiment is its own command: nvls-grow -h.
`

func fprintf(w io.Writer, format string, a ...any) { _, _ = fmt.Fprintf(w, format, a...) }
