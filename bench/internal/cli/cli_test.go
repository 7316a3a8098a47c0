package cli

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/nvls-go/nvls/cuda"
)

func TestParseSize(t *testing.T) {
	for in, want := range map[string]uint64{"8": 8, "64K": 64 << 10, "64k": 64 << 10, "128M": 128 << 20, "4G": 4 << 30,
		"4GiB": 4 << 30, "1KB": 1024, "2T": 2 << 40, "16B": 16, "0": 0, " 3 MiB ": 3 << 20} {
		got, err := ParseSize(in)
		require.NoError(t, err, in)
		assert.Equal(t, want, got, in)
	}
	for _, in := range []string{"", "K", "1.5M", "-1", "1Q", "99999999999999999999"} {
		_, err := ParseSize(in)
		assert.Error(t, err, in)
	}
	_, err := ParseSize("17179869184G")
	assert.ErrorContains(t, err, "too large")
}

func TestFormatSize(t *testing.T) {
	for n, want := range map[uint64]string{0: "0 B", 8: "8 B", 1000: "1000 B", 1024: "1 KiB", 1536: "1536 B",
		64 << 10: "64 KiB", 3 << 20: "3 MiB", 4 << 30: "4 GiB", 1<<30 + 1<<20: "1025 MiB"} {
		assert.Equal(t, want, FormatSize(n), "%d", n)
	}
}

// The reason names the missing driver once, whatever the cuda package
// wrapped around it.
func TestNoDriverSaysItOnce(t *testing.T) {
	err := fmt.Errorf("%w: dlopen libcuda.so.1: cannot open shared object file", cuda.ErrNoDriver)
	why := NoDriver(err)
	assert.Equal(t, "no CUDA driver: dlopen libcuda.so.1: cannot open shared object file", why)
	assert.Equal(t, "no CUDA driver (libcuda.so.1 could not be loaded)", NoDriver(cuda.ErrNoDriver))
	notice := SimNotice(why)
	assert.Equal(t, 1, strings.Count(notice, "no CUDA driver"), notice)
	assert.Equal(t, "Simulated NVSwitch node (no CUDA driver: dlopen libcuda.so.1: cannot open shared object file): times are NOT hardware times", notice)
}

func TestOpen(t *testing.T) {
	b, err := Open(true, SimConfig{Devices: 3, Memory: 1 << 30})
	require.NoError(t, err)
	assert.True(t, b.Simulated)
	assert.Equal(t, "asked for with -sim", b.Why)
	require.NoError(t, b.Driver.Init())
	n, err := b.Driver.DeviceCount()
	require.NoError(t, err)
	assert.Equal(t, 3, n)
	require.NoError(t, b.Close())
	require.NoError(t, b.Close(), "a second Close is harmless")

	if _, err := cuda.Load(); !errors.Is(err, cuda.ErrNoDriver) {
		t.Skip("a CUDA driver is installed here: no fallback to test")
	}
	b, err = Open(false, SimConfig{Devices: 2})
	require.NoError(t, err)
	defer b.Close()
	assert.True(t, b.Simulated)
	assert.True(t, strings.HasPrefix(b.Why, "no CUDA driver"), b.Why)
	assert.Equal(t, 1, strings.Count(SimNotice(b.Why), "no CUDA driver"), b.Why)
}

func TestFlagParseError(t *testing.T) {
	assert.EqualError(t, FlagParseError("x", errors.New("flag provided but not defined: -q")), "-q: unknown flag (run x -h for the list)")
	assert.EqualError(t, FlagParseError("x", errors.New("flag needs an argument: -d")), "-d: needs a value")
	assert.EqualError(t, FlagParseError("x", errors.New("something else")), "something else")
}
