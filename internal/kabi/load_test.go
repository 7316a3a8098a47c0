package kabi

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/nvls-go/nvls/cuda"
	"github.com/nvls-go/nvls/internal/ptxtest"
	"github.com/nvls-go/nvls/kernels"
	"github.com/nvls-go/nvls/ptx"
)

// moduleDriver is a cuda.Driver whose module calls are backed by a table:
// ModuleLoadData reads the .entry names of the image, ModuleGetFunction
// hands out a distinct Function per (module, name). Other methods are not
// used by Load (calling one panics on the nil embedded interface).
type moduleDriver struct {
	cuda.Driver
	next     uintptr
	modules  map[cuda.Module]map[string]cuda.Function
	unloaded []cuda.Module
	failLoad string // fail ModuleLoadData of an image containing this
}

func newModuleDriver() *moduleDriver {
	return &moduleDriver{next: 100, modules: map[cuda.Module]map[string]cuda.Function{}}
}

func (d *moduleDriver) ModuleLoadData(img []byte) (cuda.Module, error) {
	if d.failLoad != "" && strings.Contains(string(img), d.failLoad) {
		return 0, cuda.NewError("cuModuleLoadData", cuda.ErrorInvalidPTX, "ptxas fatal: JIT log here")
	}
	d.next++
	m := cuda.Module(d.next)
	fns := map[string]cuda.Function{}
	for _, e := range ptx.Entries(img) {
		d.next++
		fns[e.Name] = cuda.Function(d.next)
	}
	d.modules[m] = fns
	return m, nil
}

func (d *moduleDriver) ModuleGetFunction(m cuda.Module, name string) (cuda.Function, error) {
	fns, ok := d.modules[m]
	if !ok {
		return 0, cuda.NewError("cuModuleGetFunction", cuda.ErrorInvalidHandle, "")
	}
	fn, ok := fns[name]
	if !ok {
		return 0, cuda.NewError("cuModuleGetFunction", cuda.ErrorNotFound, name)
	}
	return fn, nil
}

func (d *moduleDriver) ModuleUnload(m cuda.Module) error {
	if _, ok := d.modules[m]; !ok {
		return cuda.NewError("cuModuleUnload", cuda.ErrorInvalidHandle, "")
	}
	delete(d.modules, m)
	d.unloaded = append(d.unloaded, m)
	return nil
}

// writeEntryImages writes, for both flavors, PTX text declaring the entry
// points given by entries (test input for Load's resolution logic; the
// real images come from scripts/ptx.sh).
func writeEntryImages(t *testing.T, entries func(src string, f kernels.Flavor) []string) string {
	dir := t.TempDir()
	require.NoError(t, ptxtest.WriteEntryImages(dir, kernels.Sources, entries, ParamsSize))
	return dir
}

func TestLoadResolvesEveryEntry(t *testing.T) {
	t.Setenv(ptx.EnvDir, writeEntryImages(t, kernels.Entries))
	for _, f := range ptx.Flavors {
		d := newModuleDriver()
		m, err := Load(d, f)
		require.NoError(t, err)
		assert.Equal(t, f, m.Flavor())
		seen := map[cuda.Function]bool{}
		for _, a := range kernels.Algos {
			for _, dt := range kernels.DTypes {
				for _, op := range kernels.RedOps {
					fn, ok := m.AllReduce(a, dt, op)
					assert.Equal(t, kernels.Supported(f, dt, op), ok, "%v %v %v %v", f, a, dt, op)
					if ok {
						assert.NotZero(t, fn)
						assert.False(t, seen[fn], "function handed out twice")
						seen[fn] = true
					}
				}
			}
		}
		assert.NotZero(t, m.Broadcast())
		assert.NotZero(t, m.Barrier())
		assert.NotEqual(t, m.Broadcast(), m.Barrier())
		_, ok := m.AllReduce(kernels.Algo(5), kernels.F32, kernels.Sum)
		assert.False(t, ok)

		allocs := testing.AllocsPerRun(100, func() {
			_, _ = m.AllReduce(kernels.TwoShot, kernels.BF16, kernels.Max)
			_ = m.Broadcast()
		})
		assert.Zero(t, allocs)

		require.NoError(t, m.Close())
		assert.Len(t, d.unloaded, len(kernels.Sources))
		assert.Empty(t, d.modules)
		require.NoError(t, m.Close(), "second Close is a no-op")
		_, ok = m.AllReduce(kernels.OneShot, kernels.F32, kernels.Sum)
		assert.True(t, ok)
	}
}

func TestLoadMissingEntryUnloads(t *testing.T) {
	// The broadcast image lacks its entry point: Load fails naming it and
	// unloads the module it already loaded.
	t.Setenv(ptx.EnvDir, writeEntryImages(t, func(src string, f kernels.Flavor) []string {
		if src == "broadcast" {
			return nil
		}
		return kernels.Entries(src, f)
	}))
	d := newModuleDriver()
	_, err := Load(d, kernels.Unicast)
	require.Error(t, err)
	assert.True(t, errors.Is(err, cuda.ErrNotFound), "%v", err)
	assert.Contains(t, err.Error(), kernels.BroadcastName)
	assert.Empty(t, d.modules, "every loaded module was unloaded")
}

func TestLoadJITErrorAndMissingImage(t *testing.T) {
	dir := writeEntryImages(t, kernels.Entries)
	t.Setenv(ptx.EnvDir, dir)
	d := newModuleDriver()
	d.failLoad = "// barrier"
	_, err := Load(d, kernels.Multicast)
	require.Error(t, err)
	assert.True(t, errors.Is(err, cuda.ErrInvalidPTX))
	assert.Contains(t, err.Error(), "barrier_mc.ptx")
	assert.Contains(t, err.Error(), "JIT log here")
	assert.Empty(t, d.modules)

	require.NoError(t, os.Remove(filepath.Join(dir, "allreduce_uc.ptx")))
	_, err = Load(newModuleDriver(), kernels.Unicast)
	assert.True(t, errors.Is(err, ptx.ErrNotFound), "%v", err)

	_, err = Load(newModuleDriver(), kernels.Flavor(3))
	assert.Error(t, err)
}

// TestLoadWithoutLL: PTX generated before the LL kernels (no
// nvls_allreduce_ll_* entry) loads without them; PTX with only some of
// them is refused.
func TestLoadWithoutLL(t *testing.T) {
	withoutLL := func(keep int) func(src string, f kernels.Flavor) []string {
		return func(src string, f kernels.Flavor) []string {
			var names []string
			ll := 0
			for _, n := range kernels.Entries(src, f) {
				if strings.HasPrefix(n, "nvls_allreduce_ll_") {
					if ll++; ll > keep {
						continue
					}
				}
				names = append(names, n)
			}
			return names
		}
	}
	t.Setenv(ptx.EnvDir, writeEntryImages(t, withoutLL(0)))
	d := newModuleDriver()
	m, err := Load(d, kernels.Unicast)
	require.NoError(t, err)
	assert.False(t, m.HasLL())
	_, ok := m.AllReduce(kernels.LL, kernels.F32, kernels.Sum)
	assert.False(t, ok)
	fn, ok := m.AllReduce(kernels.OneShot, kernels.F32, kernels.Sum)
	assert.True(t, ok)
	assert.NotZero(t, fn)
	require.NoError(t, m.Close())

	t.Setenv(ptx.EnvDir, writeEntryImages(t, withoutLL(3)))
	d = newModuleDriver()
	_, err = Load(d, kernels.Multicast)
	require.Error(t, err)
	assert.ErrorIs(t, err, cuda.ErrNotFound)
	assert.Contains(t, err.Error(), "some LL")
	assert.Empty(t, d.modules, "every loaded module was unloaded")

	t.Setenv(ptx.EnvDir, writeEntryImages(t, kernels.Entries))
	m, err = Load(newModuleDriver(), kernels.Multicast)
	require.NoError(t, err)
	assert.True(t, m.HasLL())
	fn, ok = m.AllReduce(kernels.LL, kernels.BF16, kernels.Max)
	assert.True(t, ok)
	assert.NotZero(t, fn)
	_, ok = m.AllReduce(kernels.LL, kernels.F32, kernels.Max)
	assert.False(t, ok, "the multicast flavor has no f32 max, LL or not")
	require.NoError(t, m.Close())
}

// TestLoadRefusesAnotherABI: PTX whose entries take a parameter block of
// another size (generated before Params grew host_status) is refused,
// naming the file, the entry and both sizes, before any module is loaded
// from it: its kernels would not see the fields this build fills.
func TestLoadRefusesAnotherABI(t *testing.T) {
	dir := writeEntryImages(t, kernels.Entries)
	name := filepath.Join(dir, ptx.FileName("broadcast", kernels.Unicast))
	img, err := os.ReadFile(name)
	require.NoError(t, err)
	old := strings.ReplaceAll(string(img), fmt.Sprintf("[%d]", ParamsSize), "[152]")
	require.NoError(t, os.WriteFile(name, []byte(old), 0o644))
	t.Setenv(ptx.EnvDir, dir)
	d := newModuleDriver()
	_, err = Load(d, kernels.Unicast)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "broadcast_uc.ptx: entry nvls_broadcast takes parameters of [152] bytes, this build passes one of 168")
	assert.Empty(t, d.modules, "what was loaded before is unloaded")
	_, err = Load(newModuleDriver(), kernels.Multicast)
	assert.NoError(t, err, "the other flavor's images are of this ABI")
}
