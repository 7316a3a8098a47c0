// Command nvls-grow runs the VMM growth experiment of package bench/grow
// on one GPU: a device buffer grown from -b to -e in fixed steps (-step)
// and by doubling, three ways (vmm.Growable, cuMemAlloc + copy, managed
// memory), with the time per step, the total time and the peak device
// memory of each, every grow checked to keep the buffer's contents.
//
//	nvls-grow [-b 2M] [-e 16G] [-step 256M] [-device 0] [-json FILE] [-plot FILE.svg|.png] [-sim] [-timeout 10m]
//
// Without a CUDA driver it runs on the simulated node (target 256M
// unless -e is given) and says so: simulated times are not hardware times.
// Exit status: 0 when every series ran and kept its contents, 1 when one
// failed, 2 for bad flags.
package main

import (
	"cmp"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"time"

	"github.com/nvls-go/nvls/bench/grow"
	"github.com/nvls-go/nvls/bench/internal/cli"
)

// defSimTarget is -e's default on the simulated node, whose memory is the
// host's.
const defSimTarget = 256 << 20

func main() { os.Exit(run(os.Args[1:], os.Stdout, os.Stderr)) }

// config is the parsed command line.
type config struct {
	args               []string
	grow               grow.Config
	targetSet          bool
	device             int
	jsonPath, plotPath string
	sim                bool
	timeout            time.Duration
}

var errHelp = errors.New("help requested")

const usage = `Usage: nvls-grow [flags]

The VMM growth experiment on one GPU: a buffer grown from -b to -e in fixed
steps and by doubling, with vmm.Growable, cuMemAlloc + copy, and managed memory.

  -b size       start size (default 2M; K, M, G suffixes = powers of 1024)
  -e size       target size (default 16G; 256M on the simulated node)
  -step size    growth per step in fixed-step mode (default 256M)
  -device n     the GPU's ordinal (default 0)
  -json FILE    write the result as JSON
  -plot FILE    plot time and memory per step (.svg or .png)
  -sim          run on the simulated NVSwitch node (not hardware times)
  -timeout d    limit for the whole experiment (default 10m)
`

func parseFlags(args []string, stderr io.Writer) (*config, error) {
	cfg := &config{args: append([]string(nil), args...), timeout: 10 * time.Minute,
		grow: grow.Config{Start: grow.DefaultStart, Target: grow.DefaultTarget}}
	fs := flag.NewFlagSet("nvls-grow", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	var first error // the first bad value, in our words
	bad := func(err error) error {
		first = cmp.Or(first, err)
		return err
	}
	size := func(name string, dst *uint64) {
		fs.Func(name, "", func(v string) error {
			n, err := cli.ParseSize(v)
			if err == nil && n == 0 {
				err = errors.New("must be above 0")
			}
			if err != nil {
				return bad(fmt.Errorf("-%s %s: %w", name, v, err))
			}
			*dst = n
			return nil
		})
	}
	size("b", &cfg.grow.Start)
	size("e", &cfg.grow.Target)
	size("step", &cfg.grow.Step)
	fs.Func("device", "", func(v string) error {
		n, err := strconv.Atoi(strings.TrimSpace(v))
		if err != nil || n < 0 {
			return bad(fmt.Errorf("-device %s: not a device ordinal (0, 1, ...)", v))
		}
		cfg.device = n
		return nil
	})
	fs.StringVar(&cfg.jsonPath, "json", "", "")
	fs.Func("plot", "", func(v string) error {
		if ext := strings.ToLower(filepath.Ext(v)); ext != ".svg" && ext != ".png" {
			return bad(fmt.Errorf("-plot %s: unknown plot format (allowed: a file name ending in .svg or .png)", v))
		}
		cfg.plotPath = v
		return nil
	})
	fs.BoolVar(&cfg.sim, "sim", false, "")
	fs.DurationVar(&cfg.timeout, "timeout", cfg.timeout, "")
	err := fs.Parse(args)
	fs.Visit(func(f *flag.Flag) { cfg.targetSet = cfg.targetSet || f.Name == "e" })
	switch {
	case errors.Is(err, flag.ErrHelp):
		fmt.Fprint(stderr, usage)
		return nil, errHelp
	case first != nil:
		return nil, first
	case err != nil:
		return nil, cli.FlagParseError("nvls-grow", err)
	case fs.NArg() > 0:
		return nil, fmt.Errorf("%q: unexpected argument (flags only; run nvls-grow -h)", fs.Arg(0))
	case cfg.timeout <= 0:
		return nil, fmt.Errorf("-timeout %v: not a positive duration", cfg.timeout)
	case cfg.grow.Start > cfg.grow.Target:
		return nil, fmt.Errorf("-b %d, -e %d: the start is above the target", cfg.grow.Start, cfg.grow.Target)
	}
	return cfg, nil
}

// run is the program; it returns the exit status.
func run(args []string, stdout, stderr io.Writer) int {
	cfg, err := parseFlags(args, stderr)
	if errors.Is(err, errHelp) {
		return 0
	}
	if err != nil {
		fmt.Fprintf(stderr, "nvls-grow: %v\n", err)
		return 2
	}
	rep, err := experiment(cfg, stdout)
	if err == nil {
		err = writeOutputs(cfg, rep, stdout)
	}
	if err != nil {
		fmt.Fprintf(stderr, "nvls-grow: %v\n", err)
		return 1
	}
	return 0
}
