package trace

import (
	"bytes"
	"log/slog"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/nvls-go/nvls/cuda"
	"github.com/nvls-go/nvls/cuda/sim"
)

// TestGenerated: driver_gen.go is what gen.go makes of cuda.Driver now
// (run `go generate ./cuda/trace` after changing the interface).
func TestGenerated(t *testing.T) {
	if testing.Short() {
		t.Skip("runs the generator with go run")
	}
	out := filepath.Join(t.TempDir(), "driver_gen.go")
	cmd := exec.Command("go", "run", "gen.go", "-o", out)
	msg, err := cmd.CombinedOutput()
	require.NoError(t, err, "%s", msg)
	want, err := os.ReadFile("driver_gen.go")
	require.NoError(t, err)
	got, err := os.ReadFile(out)
	require.NoError(t, err)
	assert.True(t, bytes.Equal(want, got), "driver_gen.go is stale: run go generate ./cuda/trace")
}

// TestDriverLogs: a call goes through to the wrapped driver, unchanged,
// and is logged at LevelTrace with its arguments, results and error.
func TestDriverLogs(t *testing.T) {
	node := sim.New(sim.Config{Devices: 2})
	defer node.Close()
	var logs bytes.Buffer
	d := New(node, slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: LevelTrace})))
	require.NoError(t, d.Init())
	n, err := d.DeviceCount()
	require.NoError(t, err)
	assert.Equal(t, 2, n)
	_, err = d.DeviceGet(7)
	require.Error(t, err)
	var ce *cuda.Error
	require.ErrorAs(t, err, &ce, "the wrapped driver's error, unchanged")
	lines := strings.Split(strings.TrimSpace(logs.String()), "\n")
	require.Len(t, lines, 3)
	assert.Contains(t, lines[1], "call=DeviceCount")
	assert.Contains(t, lines[1], "out0=2")
	assert.Contains(t, lines[1], "result=ok")
	assert.Contains(t, lines[2], "call=DeviceGet ordinal=7")
	assert.Contains(t, lines[2], "err=")
	assert.Same(t, node, d.Unwrap())

	// Below LevelTrace nothing is logged.
	logs.Reset()
	quiet := New(node, slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelDebug})))
	_, _ = quiet.DeviceCount()
	assert.Empty(t, logs.String())
}
