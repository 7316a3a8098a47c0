package grow

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"time"

	"github.com/nvls-go/nvls/cuda"
	"github.com/nvls-go/nvls/vmm"
)

// Method is one way of growing a buffer.
type Method string

// The methods compared.
const (
	Growable Method = "growable"
	Realloc  Method = "realloc"
	Managed  Method = "managed"
)

// Mode is how the size advances.
type Mode string

// The modes.
const (
	// Steps adds Config.Step bytes per step.
	Steps Mode = "step"
	// Doubling doubles the size per step.
	Doubling Mode = "double"
)

// Config is the experiment's parameters; zero values take the defaults.
type Config struct {
	// Start is the first size (default 2 MiB).
	Start uint64
	// Target is the last size (default 16 GiB).
	Target uint64
	// Step is the growth per step in Steps mode (default 256 MiB).
	Step uint64
	// Modes to run (default Steps and Doubling).
	Modes []Mode
	// Methods to run (default Growable, Realloc, Managed).
	Methods []Method
	// Chunk is the Growable's chunk size (default: the device's
	// recommended granularity).
	Chunk uint64
	// PerChunk makes the Growable create one allocation per chunk rather
	// than one per grow.
	PerChunk bool
	// Reserve is the Growable's initial reservation (default: Target, so
	// that it never moves; set it lower to exercise the extension path).
	Reserve uint64
	// Pattern is how many bytes are written and checked at each end of
	// the buffer around every grow (default 1 MiB, at most half the size).
	Pattern uint64
	// Seed seeds the patterns (0: a random seed).
	Seed uint64
}

// Defaults.
const (
	DefaultStart   = 2 << 20
	DefaultTarget  = 16 << 30
	DefaultStep    = 256 << 20
	DefaultPattern = 1 << 20
)

func (c Config) withDefaults() Config {
	if c.Start == 0 {
		c.Start = DefaultStart
	}
	if c.Target == 0 {
		c.Target = DefaultTarget
	}
	if c.Step == 0 {
		c.Step = DefaultStep
	}
	if len(c.Modes) == 0 {
		c.Modes = []Mode{Steps, Doubling}
	}
	if len(c.Methods) == 0 {
		c.Methods = []Method{Growable, Realloc, Managed}
	}
	if c.Reserve == 0 {
		c.Reserve = c.Target
	}
	if c.Pattern == 0 {
		c.Pattern = DefaultPattern
	}
	if c.Seed == 0 {
		c.Seed = rand.Uint64()
	}
	return c
}

// Sizes returns the sizes a mode goes through, from Start to Target.
func (c Config) Sizes(m Mode) ([]uint64, error) {
	c = c.withDefaults()
	if c.Start > c.Target {
		return nil, fmt.Errorf("grow: start %d is above the target %d", c.Start, c.Target)
	}
	sizes := []uint64{c.Start}
	for cur := c.Start; cur < c.Target; {
		switch m {
		case Steps:
			cur += c.Step
		case Doubling:
			cur *= 2
		default:
			return nil, fmt.Errorf("grow: unknown mode %q", m)
		}
		if cur > c.Target || cur < sizes[len(sizes)-1] {
			cur = c.Target
		}
		sizes = append(sizes, cur)
	}
	return sizes, nil
}

// Step is one step of a series.
type Step struct {
	// Size is the buffer's size after the step.
	Size uint64
	// Time is how long the step took (allocation, mapping, copy,
	// prefetch, synchronization: everything but the pattern check and
	// the memory sampling).
	Time time.Duration
	// Used is the device memory in use at the step's high point (for
	// realloc: with the old and the new buffer both allocated), less what
	// was in use before the series began.
	Used uint64
}

// Series is one method run in one mode.
type Series struct {
	Method Method
	Mode   Mode
	Steps  []Step
	// Total is the sum of the step times.
	Total time.Duration
	// Peak is the largest Used.
	Peak uint64
	// Moves is how often the Growable's base address moved.
	Moves uint64
	// Checked counts the pattern checks that passed (one per grow).
	Checked int
}

// Final is the size reached.
func (s Series) Final() uint64 {
	if len(s.Steps) == 0 {
		return 0
	}
	return s.Steps[len(s.Steps)-1].Size
}

// Result is the whole experiment.
type Result struct {
	Device     cuda.Device
	DeviceName string
	Driver     string
	Config     Config
	Series     []Series
}

// Find returns the series of a method and mode.
func (r Result) Find(m Method, mode Mode) (Series, bool) {
	for _, s := range r.Series {
		if s.Method == m && s.Mode == mode {
			return s, true
		}
	}
	return Series{}, false
}

// ErrMismatch is a pattern written before a grow that read back
// differently after it.
var ErrMismatch = errors.New("grow: data changed across a grow")

// Run runs the experiment on device dev. It needs dev's context current
// on the calling, locked OS thread (see the package documentation).
func Run(ctx context.Context, d cuda.Driver, dev cuda.Device, cfg Config) (Result, error) {
	cfg = cfg.withDefaults()
	res := Result{Device: dev, Driver: d.Name(), Config: cfg}
	name, err := d.DeviceName(dev)
	if err != nil {
		return res, fmt.Errorf("grow: device name: %w", err)
	}
	res.DeviceName = name
	cur, err := d.CtxGetCurrent()
	if err != nil || cur == 0 {
		return res, fmt.Errorf("grow: no current context (lock the OS thread and make device %d's primary context current): %v", dev, err)
	}
	rng := rand.New(rand.NewPCG(cfg.Seed, 0x9e3779b97f4a7c15))
	for _, mode := range cfg.Modes {
		sizes, err := cfg.Sizes(mode)
		if err != nil {
			return res, err
		}
		for _, m := range cfg.Methods {
			r := &runner{ctx: ctx, d: d, dev: dev, cfg: cfg, rng: rng, s: Series{Method: m, Mode: mode}}
			switch m {
			case Growable:
				err = r.growable(sizes)
			case Realloc:
				err = r.realloc(sizes)
			case Managed:
				err = r.managed(sizes)
			default:
				err = fmt.Errorf("grow: unknown method %q", m)
			}
			if err != nil {
				return res, fmt.Errorf("grow: %s, %s mode: %w", m, mode, err)
			}
			res.Series = append(res.Series, r.s)
		}
	}
	return res, nil
}

type runner struct {
	ctx  context.Context
	d    cuda.Driver
	dev  cuda.Device
	cfg  Config
	rng  *rand.Rand
	s    Series
	base uint64
	// the pattern written at each end before the current grow
	head, tail []byte
}

func (r *runner) used() (uint64, error) {
	free, total, err := r.d.MemGetInfo()
	if err != nil {
		return 0, fmt.Errorf("memory info: %w", err)
	}
	return total - free, nil
}

func (r *runner) start() error {
	u, err := r.used()
	r.base = u
	return err
}

// record adds a step whose high point was sampled as used.
func (r *runner) record(size uint64, t time.Duration, used uint64) {
	rel := uint64(0)
	if used > r.base {
		rel = used - r.base
	}
	r.s.Steps = append(r.s.Steps, Step{Size: size, Time: t, Used: rel})
	r.s.Total += t
	r.s.Peak = max(r.s.Peak, rel)
}

// sample is record with the memory sampled now.
func (r *runner) sample(size uint64, t time.Duration) error {
	u, err := r.used()
	if err != nil {
		return err
	}
	r.record(size, t, u)
	return nil
}

// write puts fresh random patterns at both ends of [p, p+size).
func (r *runner) write(p cuda.DevicePtr, size uint64) error {
	n := min(r.cfg.Pattern, size/2)
	r.head, r.tail = make([]byte, n), make([]byte, n)
	for _, b := range [][]byte{r.head, r.tail} {
		for i := range b {
			b[i] = byte(r.rng.Uint32())
		}
	}
	if err := cuda.CopyHtoD(r.d, p, r.head); err != nil {
		return fmt.Errorf("write the pattern at the start: %w", err)
	}
	if err := cuda.CopyHtoD(r.d, p+cuda.DevicePtr(size-n), r.tail); err != nil {
		return fmt.Errorf("write the pattern at the end: %w", err)
	}
	return nil
}

// check reads back what write put at both ends of the old size (now at p).
func (r *runner) check(p cuda.DevicePtr, oldSize, newSize uint64) error {
	n := uint64(len(r.head))
	for _, part := range []struct {
		off  uint64
		want []byte
	}{{0, r.head}, {oldSize - n, r.tail}} {
		got := make([]byte, n)
		if err := cuda.CopyDtoH(r.d, got, p+cuda.DevicePtr(part.off)); err != nil {
			return fmt.Errorf("read back the pattern: %w", err)
		}
		if !bytes.Equal(got, part.want) {
			i := 0
			for got[i] == part.want[i] {
				i++
			}
			return fmt.Errorf("%w: growing %d to %d bytes, byte %d is %#x, was %#x", ErrMismatch, oldSize, newSize, part.off+uint64(i), got[i], part.want[i])
		}
	}
	r.s.Checked++
	return nil
}

// steps grows from sizes[0] through the rest of sizes: before each grow
// it writes fresh patterns at both ends of the old size, grow(old, size)
// grows and records the step, and after it the patterns are checked at
// ptr() (the base may have moved).
func (r *runner) steps(sizes []uint64, ptr func() cuda.DevicePtr, grow func(old, size uint64) error) error {
	old := sizes[0]
	for _, size := range sizes[1:] {
		if err := r.ctx.Err(); err != nil {
			return err
		}
		if err := r.write(ptr(), old); err != nil {
			return err
		}
		if err := grow(old, size); err != nil {
			return err
		}
		if err := r.check(ptr(), old, size); err != nil {
			return err
		}
		old = size
	}
	return nil
}

func (r *runner) growable(sizes []uint64) error {
	if err := r.start(); err != nil {
		return err
	}
	t := time.Now()
	g, err := vmm.NewGrowable(r.d, sizes[0], vmm.GrowableOptions{
		Device:   r.dev,
		Chunk:    r.cfg.Chunk,
		Coalesce: !r.cfg.PerChunk,
		Reserve:  r.cfg.Reserve,
	})
	el := time.Since(t)
	if err != nil {
		return err
	}
	defer func() {
		if g != nil {
			_ = g.Close()
		}
	}()
	if err := r.sample(sizes[0], el); err != nil {
		return err
	}
	err = r.steps(sizes, g.Ptr, func(old, size uint64) error {
		t := time.Now()
		err := g.Grow(size - old)
		el := time.Since(t)
		if err != nil {
			return err
		}
		return r.sample(size, el)
	})
	if err != nil {
		return err
	}
	r.s.Moves = g.Generation()
	err = g.Close()
	g = nil
	return err
}

func (r *runner) realloc(sizes []uint64) error {
	if err := r.start(); err != nil {
		return err
	}
	t := time.Now()
	p, err := r.d.MemAlloc(sizes[0])
	el := time.Since(t)
	if err != nil {
		return fmt.Errorf("cuMemAlloc %d: %w", sizes[0], err)
	}
	defer func() {
		if p != 0 {
			_ = r.d.MemFree(p)
		}
	}()
	if err := r.sample(sizes[0], el); err != nil {
		return err
	}
	err = r.steps(sizes, func() cuda.DevicePtr { return p }, func(old, size uint64) error {
		t := time.Now()
		q, err := r.d.MemAlloc(size)
		el := time.Since(t)
		if err != nil {
			return fmt.Errorf("cuMemAlloc %d: %w", size, err)
		}
		used, uerr := r.used() // the high point: old and new both held
		t = time.Now()
		if err := r.d.MemcpyDtoD(q, p, old); err != nil {
			_ = r.d.MemFree(q)
			return fmt.Errorf("copy %d bytes: %w", old, err)
		}
		if err := r.d.CtxSynchronize(); err != nil {
			_ = r.d.MemFree(q)
			return fmt.Errorf("synchronize after the copy: %w", err)
		}
		ferr := r.d.MemFree(p)
		el += time.Since(t)
		p = q
		if ferr != nil {
			return fmt.Errorf("cuMemFree: %w", ferr)
		}
		if uerr != nil {
			return uerr
		}
		r.record(size, el, used)
		return nil
	})
	if err != nil {
		return err
	}
	err = r.d.MemFree(p)
	p = 0
	if err != nil {
		return fmt.Errorf("cuMemFree: %w", err)
	}
	return nil
}

func (r *runner) managed(sizes []uint64) error {
	if err := r.start(); err != nil {
		return err
	}
	target := sizes[len(sizes)-1]
	t := time.Now()
	p, err := r.d.MemAllocManaged(target, cuda.MemAttachGlobal)
	if err != nil {
		return fmt.Errorf("cuMemAllocManaged %d: %w", target, err)
	}
	defer func() {
		if p != 0 {
			_ = r.d.MemFree(p)
		}
	}()
	if err := r.prefetch(p, 0, sizes[0]); err != nil {
		return err
	}
	if err := r.sample(sizes[0], time.Since(t)); err != nil {
		return err
	}
	err = r.steps(sizes, func() cuda.DevicePtr { return p }, func(old, size uint64) error {
		t := time.Now()
		if err := r.prefetch(p, old, size); err != nil {
			return err
		}
		return r.sample(size, time.Since(t))
	})
	if err != nil {
		return err
	}
	err = r.d.MemFree(p)
	p = 0
	if err != nil {
		return fmt.Errorf("cuMemFree: %w", err)
	}
	return nil
}

// prefetch moves [from, to) of the managed buffer at p to the device and
// waits for it.
func (r *runner) prefetch(p cuda.DevicePtr, from, to uint64) error {
	if err := r.d.MemPrefetchAsync(p+cuda.DevicePtr(from), to-from, r.dev, 0); err != nil {
		return fmt.Errorf("prefetch [%d, %d): %w", from, to, err)
	}
	if err := r.d.CtxSynchronize(); err != nil {
		return fmt.Errorf("synchronize after the prefetch: %w", err)
	}
	return nil
}
