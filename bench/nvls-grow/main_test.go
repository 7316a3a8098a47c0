package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/nvls-go/nvls/bench/internal/cli"
)

func runGrow(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var o, e bytes.Buffer
	code = run(args, &o, &e)
	return code, o.String(), e.String()
}

// The experiment end to end on the simulated node: the table, the JSON
// and the plot.
func TestGrowOnSim(t *testing.T) {
	dir := t.TempDir()
	js, png := filepath.Join(dir, "g.json"), filepath.Join(dir, "g.png")
	code, out, errOut := runGrow(t, "-sim", "-b", "2M", "-e", "16M", "-step", "4M", "-json", js, "-plot", png)
	require.Equal(t, 0, code, "stdout:\n%s\nstderr:\n%s", out, errOut)
	assert.Contains(t, out, "# nvls-grow: start 2 MiB target 16 MiB step 4 MiB\n")
	assert.Contains(t, out, "\n# Simulated NVSwitch node (asked for with -sim): times are NOT hardware times\n")
	assert.Contains(t, out, "growable")
	assert.Contains(t, out, "realloc")
	b, err := os.ReadFile(js)
	require.NoError(t, err)
	var raw map[string]any
	require.NoError(t, json.Unmarshal(b, &raw))
	assert.Equal(t, "nvls-grow", raw["tool"])
	g, ok := raw["grow"].(map[string]any)
	require.True(t, ok, "JSON has the grow result")
	assert.NotEmpty(t, g["Series"])
	st, err := os.Stat(png)
	require.NoError(t, err)
	assert.Greater(t, st.Size(), int64(1000))
}

// On the simulated node the target defaults to 256 MiB (its memory is the
// host's); the device flag picks the GPU.
func TestGrowSimDefaults(t *testing.T) {
	code, out, errOut := runGrow(t, "-sim", "-device", "1", "-step", "128M")
	require.Equal(t, 0, code, "stdout:\n%s\nstderr:\n%s", out, errOut)
	assert.Contains(t, out, "# nvls-grow: start 2 MiB target 256 MiB step 128 MiB\n")
	assert.Contains(t, out, "# Device 1 [")
}

func TestGrowFlagErrors(t *testing.T) {
	for args, want := range map[string]string{
		"-b 12X":              "nvls-grow: -b 12X: not a size (want a byte count like 8, 64K, 128M, 4G)\n",
		"-step 0":             "nvls-grow: -step 0: must be above 0\n",
		"-b 1G -e 1M":         "nvls-grow: -b 1073741824, -e 1048576: the start is above the target\n",
		"-device -1":          "nvls-grow: -device -1: not a device ordinal (0, 1, ...)\n",
		"-plot g.pdf":         "nvls-grow: -plot g.pdf: unknown plot format (allowed: a file name ending in .svg or .png)\n",
		"-timeout 0s":         "nvls-grow: -timeout 0s: not a positive duration\n",
		"-coll allreduce":     "nvls-grow: -coll: unknown flag (run nvls-grow -h for the list)\n",
		"extra":               "nvls-grow: \"extra\": unexpected argument (flags only; run nvls-grow -h)\n",
		"-sim -device 0 -g 2": "nvls-grow: -g: unknown flag (run nvls-grow -h for the list)\n",
		"-json":               "nvls-grow: -json: needs a value\n",
	} {
		code, out, errOut := runGrow(t, strings.Fields(args)...)
		assert.Equal(t, 2, code, args)
		assert.Empty(t, out, args)
		assert.Equal(t, want, errOut, args)
	}
	code, _, errOut := runGrow(t, "-h")
	assert.Equal(t, 0, code)
	assert.Contains(t, errOut, "Usage: nvls-grow")
}

// A device the machine does not have is a run error, named.
func TestGrowNoSuchDevice(t *testing.T) {
	b, err := cli.Open(true, cli.SimConfig{Devices: 1})
	require.NoError(t, err)
	defer b.Close()
	var m machine
	_, err = openDevice(b, 5, &m)
	assert.EqualError(t, err, "-device 5: only 1 GPUs on this machine")
}
