package main

import (
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/nvls-go/nvls/collectives"
	"github.com/nvls-go/nvls/kernels"
	"github.com/nvls-go/nvls/team"
)

// Defaults.
const (
	defMinBytes    = 8
	defMaxBytes    = 128 << 20 // nccl-tests' usual "-b 8 -e 128M -f 2"
	defSimMaxBytes = 1 << 20   // the simulated node runs kernels in Go
	defSimGPUs     = 4
	defTimeout     = 2 * time.Minute
)

// collKind is what -coll names.
type collKind string

const (
	collAllReduce collKind = "allreduce"
	collBroadcast collKind = "broadcast"
	collBarrier   collKind = "barrier"
	collGrow      collKind = "grow"
)

var collNames = []collKind{collAllReduce, collBroadcast, collBarrier, collGrow}

// config is the parsed command line.
type config struct {
	args []string

	minBytes, maxBytes uint64
	stepFactor         uint64
	iters, warmup      int
	check              bool
	gpus               int // 0: all
	dtype              kernels.DType
	op                 kernels.RedOp
	root               int
	coll               collKind
	transport          string
	graph              bool
	compare            string // "" or "nccl"
	jsonPath           string
	plotPath           string
	sim                bool
	timing             string // "avg" or "median"
	timeout            time.Duration

	growStep uint64 // -coll grow: the fixed step (0: the package's default)

	// rank is set by the per-rank launcher (mpirun; launch.go): this
	// process drives one rank of the job. nil: it drives every GPU.
	rank *rankWorld

	// set records the flags given on the command line.
	set map[string]bool
}

var errHelp = errors.New("help requested")

// parseSize reads a byte count as nccl-tests does (a number with an
// optional K, M, G or T suffix, powers of 1024), also accepting KiB/KB/B.
func parseSize(s string) (uint64, error) {
	t := strings.TrimSpace(s)
	u := strings.ToUpper(t)
	mult := uint64(1)
	for _, suf := range []struct {
		s string
		m uint64
	}{{"KIB", 1 << 10}, {"MIB", 1 << 20}, {"GIB", 1 << 30}, {"TIB", 1 << 40},
		{"KB", 1 << 10}, {"MB", 1 << 20}, {"GB", 1 << 30}, {"TB", 1 << 40},
		{"K", 1 << 10}, {"M", 1 << 20}, {"G", 1 << 30}, {"T", 1 << 40}, {"B", 1}} {
		if strings.HasSuffix(u, suf.s) {
			mult = suf.m
			u = strings.TrimSpace(strings.TrimSuffix(u, suf.s))
			break
		}
	}
	n, err := strconv.ParseUint(u, 10, 64)
	if err != nil || u == "" {
		return 0, fmt.Errorf("not a size (want a byte count like 8, 64K, 128M, 4G)")
	}
	if n > math.MaxUint64/mult {
		return 0, fmt.Errorf("too large")
	}
	return n * mult, nil
}

// formatSize is a short human form of a byte count (8 B, 64 KiB, 4 GiB).
func formatSize(n uint64) string {
	switch {
	case n >= 1<<30 && n%(1<<30) == 0:
		return fmt.Sprintf("%d GiB", n>>30)
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%d MiB", n>>20)
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("%d KiB", n>>10)
	}
	return fmt.Sprintf("%d B", n)
}

func allowed[T ~string](xs []T) string {
	s := make([]string, len(xs))
	for i, x := range xs {
		s[i] = string(x)
	}
	return strings.Join(s, ", ")
}

// flagError is a bad value for a flag: "-d float64: unknown dtype (allowed: ...)".
type flagError struct {
	flag, value, msg string
}

func (e *flagError) Error() string { return fmt.Sprintf("-%s %s: %s", e.flag, e.value, e.msg) }

func parseFlags(args []string, stderr io.Writer) (*config, error) {
	cfg := &config{
		args:       append([]string(nil), args...),
		minBytes:   defMinBytes,
		maxBytes:   defMaxBytes,
		stepFactor: 2,
		iters:      20,
		warmup:     5,
		check:      true,
		dtype:      kernels.F32,
		op:         kernels.Sum,
		coll:       collAllReduce,
		transport:  "auto",
		timing:     "avg",
		timeout:    defTimeout,
		set:        map[string]bool{},
	}
	fs := flag.NewFlagSet("nvls-bench", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	var first error // the first bad value, in our words
	bad := func(name, v, format string, a ...any) error {
		err := &flagError{flag: name, value: v, msg: fmt.Sprintf(format, a...)}
		if first == nil {
			first = err
		}
		return err
	}
	size := func(name string, dst *uint64) {
		fs.Func(name, "", func(v string) error {
			n, err := parseSize(v)
			if err != nil {
				return bad(name, v, "%v", err)
			}
			*dst = n
			return nil
		})
	}
	intFlag := func(name string, dst *int, lo, hi int, what string) {
		fs.Func(name, "", func(v string) error {
			n, err := strconv.Atoi(strings.TrimSpace(v))
			if err != nil {
				return bad(name, v, "not an integer (%s)", what)
			}
			if n < lo || n > hi {
				return bad(name, v, "out of range (%s)", what)
			}
			*dst = n
			return nil
		})
	}
	choice := func(name string, dst *string, choices ...string) {
		fs.Func(name, "", func(v string) error {
			for _, c := range choices {
				if strings.EqualFold(v, c) {
					*dst = c
					return nil
				}
			}
			return bad(name, v, "unknown %s (allowed: %s)", name, strings.Join(choices, ", "))
		})
	}
	size("b", &cfg.minBytes)
	size("e", &cfg.maxBytes)
	fs.Func("f", "", func(v string) error {
		n, err := strconv.ParseUint(strings.TrimSpace(v), 10, 64)
		if err != nil || n < 2 {
			return bad("f", v, "step factor must be an integer >= 2")
		}
		cfg.stepFactor = n
		return nil
	})
	intFlag("n", &cfg.iters, 1, 1<<24, "timed iterations: an integer >= 1")
	intFlag("w", &cfg.warmup, 0, 1<<24, "warm-up iterations: an integer >= 0")
	var check int
	fs.Func("c", "", func(v string) error {
		switch strings.TrimSpace(v) {
		case "0":
			check = 0
		case "1":
			check = 1
		default:
			return bad("c", v, "check must be 0 or 1")
		}
		cfg.check = check == 1
		return nil
	})
	intFlag("g", &cfg.gpus, 1, kernels.MaxRanks, fmt.Sprintf("GPUs: 1 to %d", kernels.MaxRanks))
	fs.Func("d", "", func(v string) error {
		t, err := kernels.ParseDType(v)
		if err != nil {
			return bad("d", v, "unknown dtype (allowed: %s)", allowed(kernels.DTypeSpellings()))
		}
		cfg.dtype = t
		return nil
	})
	fs.Func("o", "", func(v string) error {
		o, err := kernels.ParseRedOp(v)
		if err != nil {
			return bad("o", v, "unknown op (allowed: sum, min, max)")
		}
		cfg.op = o
		return nil
	})
	intFlag("r", &cfg.root, 0, kernels.MaxRanks-1, fmt.Sprintf("root rank: 0 to %d, below -g", kernels.MaxRanks-1))
	fs.Func("coll", "", func(v string) error {
		for _, c := range collNames {
			if strings.EqualFold(v, string(c)) {
				cfg.coll = c
				return nil
			}
		}
		return bad("coll", v, "unknown collective (allowed: %s)", allowed(collNames))
	})
	choice("transport", &cfg.transport, "auto", "multicast", "unicast")
	fs.BoolFunc("graph", "", func(v string) error {
		b, err := strconv.ParseBool(v)
		if err != nil {
			return bad("graph", v, "not a boolean")
		}
		cfg.graph = b
		return nil
	})
	choice("compare", &cfg.compare, "nccl", "none")
	fs.Func("json", "", func(v string) error {
		if v == "" {
			return bad("json", `""`, "empty file name")
		}
		cfg.jsonPath = v
		return nil
	})
	fs.Func("plot", "", func(v string) error {
		switch strings.ToLower(filepath.Ext(v)) {
		case ".svg", ".png":
			cfg.plotPath = v
			return nil
		}
		return bad("plot", v, "unknown plot format (allowed: a file name ending in .svg or .png)")
	})
	fs.BoolFunc("sim", "", func(v string) error {
		b, err := strconv.ParseBool(v)
		if err != nil {
			return bad("sim", v, "not a boolean")
		}
		cfg.sim = b
		return nil
	})
	choice("timing", &cfg.timing, "avg", "median")
	fs.Func("timeout", "", func(v string) error {
		d, err := time.ParseDuration(v)
		if err != nil || d <= 0 {
			return bad("timeout", v, "not a positive duration (e.g. 30s, 2m)")
		}
		cfg.timeout = d
		return nil
	})
	size("grow-step", &cfg.growStep)

	err := fs.Parse(args)
	fs.Visit(func(f *flag.Flag) { cfg.set[f.Name] = true })
	switch {
	case errors.Is(err, flag.ErrHelp):
		fmt.Fprint(stderr, usage)
		return nil, errHelp
	case first != nil:
		return nil, first
	case err != nil:
		// The flag package's own complaints: an unknown flag or a missing value.
		msg := err.Error()
		if name, ok := strings.CutPrefix(msg, "flag provided but not defined: "); ok {
			return nil, fmt.Errorf("%s: unknown flag (run nvls-bench -h for the list)", name)
		}
		if name, ok := strings.CutPrefix(msg, "flag needs an argument: "); ok {
			return nil, fmt.Errorf("%s: needs a value", name)
		}
		return nil, errors.New(msg)
	}
	if fs.NArg() > 0 {
		return nil, fmt.Errorf("%q: unexpected argument (flags only; run nvls-bench -h)", fs.Arg(0))
	}
	if cfg.compare == "none" {
		cfg.compare = ""
	}
	return cfg, cfg.validate()
}

// validate checks what single flags cannot: how they combine.
func (c *config) validate() error {
	if c.minBytes > c.maxBytes {
		return fmt.Errorf("-b %d, -e %d: the smallest size is larger than the largest", c.minBytes, c.maxBytes)
	}
	if c.set["g"] && c.set["r"] && c.root >= c.gpus {
		return &flagError{"r", strconv.Itoa(c.root), fmt.Sprintf("root out of range (0 to %d with -g %d)", c.gpus-1, c.gpus)}
	}
	if tr, err := team.ParseTransport(c.transport); err == nil && tr != team.Auto && c.coll == collAllReduce {
		if err := kernels.CheckSupported(collectives.FlavorOf(tr), c.dtype, c.op); err != nil {
			return &flagError{"o", c.op.String(), fmt.Sprintf("-transport %s: %v", c.transport, err)}
		}
	}
	if c.coll != collAllReduce && c.set["o"] {
		return &flagError{"o", c.op.String(), fmt.Sprintf("-coll %s takes no reduction op", c.coll)}
	}
	if c.coll == collBarrier && c.set["d"] {
		return &flagError{"d", c.dtype.NCCLName(), "-coll barrier moves no data: it takes no dtype"}
	}
	if c.coll == collGrow && c.compare != "" {
		return &flagError{"compare", c.compare, "-coll grow has no NCCL counterpart"}
	}
	if c.coll != collGrow && c.set["grow-step"] {
		return errors.New("-grow-step: only with -coll grow")
	}
	if c.coll == collBarrier && c.plotPath != "" {
		return &flagError{"plot", c.plotPath, "-coll barrier has no sizes to plot against (use -json)"}
	}
	if c.coll == collBarrier && c.compare != "" {
		return &flagError{"compare", c.compare, "NCCL has no barrier to compare with"}
	}
	return nil
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
  -c 0|1        check results against a host reference (default 1)
  -g gpus       number of GPUs (default: all; the simulated node has 4)
  -d type       float|half|bfloat16|int32|uint32|uint64 (or f32|f16|bf16|s32|u32|u64)
  -o op         sum|min|max (default sum; allreduce only)
  -r root       broadcast root rank (default 0)

nvls-bench's own:
  -coll c       allreduce|broadcast|barrier|grow (default allreduce)
  -transport t  auto|multicast|unicast (default auto)
  -graph        capture the -n iterations into one CUDA graph per GPU and time its replay
  -compare nccl also run NCCL (libnccl.so.2) on the same buffers; ratio = NCCL time / ours
  -timing m     avg (nccl-tests' way, default) or median (of per-iteration timings)
  -json FILE    write every figure as JSON
  -plot FILE    plot busbw and time against size (.svg or .png)
  -sim          run on the simulated NVSwitch node (not hardware times)
  -timeout d    limit for any one wait (default 2m)

-coll grow (the VMM growth experiment, on the first GPU): -b is the start size
(default 2M), -e the target (default 16G; 256M on the simulated node) and
  -grow-step s  the growth per step in fixed-step mode (default 256M)
`

func fprintf(w io.Writer, format string, a ...any) { _, _ = fmt.Fprintf(w, format, a...) }
