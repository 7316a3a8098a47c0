package collectives

import (
	"bytes"
	"os"
	"path/filepath"
	"sync"
	"sync/atomic"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/nvls-go/nvls/cuda"
	"github.com/nvls-go/nvls/internal/kabi"
	"github.com/nvls-go/nvls/internal/ptxtest"
	"github.com/nvls-go/nvls/kernels"
	"github.com/nvls-go/nvls/ptx"
	"github.com/nvls-go/nvls/team"
)

// pdlRecorder records each launch's Programmatic attribute and flags.
type pdlRecorder struct {
	cuda.Driver
	mu    sync.Mutex
	prog  []bool
	flags []uint32
}

func (d *pdlRecorder) LaunchKernelEx(f cuda.Function, cfg cuda.LaunchConfig, params unsafe.Pointer, paramSize uintptr) error {
	d.mu.Lock()
	d.prog = append(d.prog, cfg.Programmatic)
	d.flags = append(d.flags, (*kabi.Params)(params).Flags)
	d.mu.Unlock()
	return d.Driver.LaunchKernelEx(f, cfg, params, paramSize)
}

// oldDriver reports an older driver, version v, and counts the launches
// of each entry point.
type oldDriver struct {
	cuda.Driver
	v         int
	plain, ex atomic.Int32 // the ranks launch at once, on their workers
}

func (d *oldDriver) DriverVersion() (int, error) { return d.v, nil }

func (d *oldDriver) LaunchKernel(f cuda.Function, grid, block cuda.Dim3, sharedMem uint32, s cuda.Stream, params unsafe.Pointer, paramSize uintptr) error {
	d.plain.Add(1)
	return d.Driver.LaunchKernel(f, grid, block, sharedMem, s, params, paramSize)
}

func (d *oldDriver) LaunchKernelEx(f cuda.Function, cfg cuda.LaunchConfig, params unsafe.Pointer, paramSize uintptr) error {
	d.ex.Add(1)
	return d.Driver.LaunchKernelEx(f, cfg, params, paramSize)
}

// pdlImages writes stand-in PTX for every kernel into a fresh directory
// and points NVLS_PTX_DIR at it: with griddepcontrol.wait in every entry
// (the current sources), or, wait false, without it (PTX generated before
// kernel_entry).
func pdlImages(t *testing.T, wait bool) {
	t.Helper()
	dir := t.TempDir()
	require.NoError(t, ptxtest.WriteEntryImages(dir, kernels.Sources, kernels.Entries, kabi.ParamsSize))
	if !wait {
		files, err := filepath.Glob(filepath.Join(dir, "*.ptx"))
		require.NoError(t, err)
		for _, p := range files {
			img, err := os.ReadFile(p)
			require.NoError(t, err)
			require.NoError(t, os.WriteFile(p, bytes.ReplaceAll(img, []byte("griddepcontrol.wait;"), nil), 0o644))
		}
	}
	t.Setenv(ptx.EnvDir, dir)
}

// TestPDLLaunches: how the kernels launch under each PDL setting, and that
// the results stay right (an all-reduce of every algorithm and a
// broadcast, checked against the reference).
func TestPDLLaunches(t *testing.T) {
	for _, tc := range []struct {
		name  string
		opts  []Option
		env   string
		want  PDL
		early bool
	}{
		{"auto", nil, "", PDLWait, false},
		{"off", []Option{WithPDL(PDLOff)}, "", PDLOff, false},
		{"wait", []Option{WithPDL(PDLWait)}, "", PDLWait, false},
		{"early", []Option{WithPDL(PDLEarly)}, "", PDLEarly, true},
		{"env off", nil, "off", PDLOff, false},
		{"env early", nil, "early", PDLEarly, true},
		{"option over env", []Option{WithPDL(PDLWait)}, "off", PDLWait, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			pdlImages(t, true)
			t.Setenv(EnvPDL, tc.env)
			opts := append([]Option{WithLLMax(4 << 10), WithOneShotMax(64 << 10)}, tc.opts...)
			f := newFixture(t, fixtureConfig{ranks: 3, transport: team.Unicast, opts: opts})
			assert.Equal(t, tc.want, f.c.pdl)
			d := &pdlRecorder{Driver: f.c.d}
			f.c.d = d
			rng := newRNG(t)
			a, b := f.alloc(1<<20+guardBytes), f.alloc(1<<20+guardBytes)
			for _, count := range []int{100, 8 << 10, 200 << 10} { // LL, one-shot, two-shot
				runAllReduce(t, f, f.c, rng, f.ptrs(a), f.ptrs(b), F32, Sum, count)
			}
			runBroadcast(t, f, f.c, rng, f.ptrs(a), f.ptrs(b), F32, 1<<12, 1)
			f.c.d = d.Driver
			require.Len(t, d.prog, 4*3, "one launch per collective and rank")
			for i := range d.prog {
				assert.Equal(t, tc.want != PDLOff, d.prog[i], "launch %d: programmatic", i)
				assert.Equal(t, tc.early, d.flags[i]&kabi.FlagLaunchDependents != 0, "launch %d: flags %#x", i, d.flags[i])
			}
		})
	}
}

// TestPDLUnsupported: PDLAuto turns PDL off where the PTX does not wait at
// entry, the driver is older than CUDA 12.3, or (PDLEarly) ranks share a
// device; asked for explicitly there, New fails with ErrInvalid.
func TestPDLUnsupported(t *testing.T) {
	t.Run("old PTX", func(t *testing.T) {
		pdlImages(t, false)
		f := newFixture(t, fixtureConfig{ranks: 2, transport: team.Unicast})
		assert.Equal(t, PDLOff, f.c.pdl)
		assert.Contains(t, f.c.pdlWhy, "griddepcontrol.wait")
		for _, p := range []PDL{PDLWait, PDLEarly} {
			_, err := New(f.t, WithPDL(p))
			assert.ErrorIs(t, err, ErrInvalid, "%v", p)
			assert.ErrorContains(t, err, "WithPDL="+p.String())
		}
		t.Setenv(EnvPDL, "wait")
		_, err := New(f.t)
		assert.ErrorIs(t, err, ErrInvalid)
		assert.ErrorContains(t, err, EnvPDL+"=wait")
	})
	t.Run("old driver", func(t *testing.T) {
		pdlImages(t, true)
		f := newFixture(t, fixtureConfig{ranks: 2, transport: team.Unicast})
		d := f.c.d
		f.c.d = &oldDriver{Driver: d, v: 12020}
		defer func() { f.c.d = d }()
		f.c.cfg.pdl = PDLAuto
		require.NoError(t, f.c.decidePDL())
		assert.Equal(t, PDLOff, f.c.pdl)
		assert.Contains(t, f.c.pdlWhy, "CUDA 12.2")
		f.c.cfg.pdl, f.c.cfg.pdlSrc = PDLWait, "WithPDL"
		assert.ErrorIs(t, f.c.decidePDL(), ErrInvalid)
	})
	t.Run("driver without cuLaunchKernelEx", func(t *testing.T) {
		pdlImages(t, true)
		f := newFixture(t, fixtureConfig{ranks: 2, transport: team.Unicast})
		d := f.c.d
		old := &oldDriver{Driver: d, v: 11040}
		f.c.d = old
		defer func() { f.c.d = d }()
		f.c.cfg.pdl = PDLAuto
		require.NoError(t, f.c.decidePDL())
		assert.Equal(t, PDLOff, f.c.pdl)
		assert.True(t, f.c.plainLaunch)
		a, b := f.alloc(4<<10+guardBytes), f.alloc(4<<10+guardBytes)
		runAllReduce(t, f, f.c, newRNG(t), f.ptrs(a), f.ptrs(b), F32, Sum, 1000)
		assert.EqualValues(t, 2, old.plain.Load(), "cuLaunchKernel, one a rank")
		assert.Zero(t, old.ex.Load(), "no cuLaunchKernelEx")
	})
	t.Run("shared devices", func(t *testing.T) {
		pdlImages(t, true)
		f, _ := newSharedFixture(t, sharedConfig{gpus: 1, devs: []cuda.Device{0, 0}, opts: []Option{WithPDL(PDLWait)}})
		assert.Equal(t, PDLWait, f.c.pdl, "wait is safe with shared devices")
		_, err := New(f.t, WithPDL(PDLEarly))
		assert.ErrorIs(t, err, ErrInvalid)
		assert.ErrorContains(t, err, "share a device")
	})
	t.Run("bad values", func(t *testing.T) {
		_, err := resolve([]Option{WithPDL(PDL(9))})
		assert.ErrorIs(t, err, ErrInvalid)
		t.Setenv(EnvPDL, "sometimes")
		_, err = resolve(nil)
		assert.ErrorIs(t, err, ErrBadEnv)
	})
}
