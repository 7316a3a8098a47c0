//go:build mpi

package mpi

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/nvls-go/nvls/cuda"
	"github.com/nvls-go/nvls/cuda/sim"
	"github.com/nvls-go/nvls/team/mpi/handletype"
)

// TestHandleTypeFabricNotPermitted: on every rank the device reports
// fabric handles and an IMEX channel node opens, but the driver does not
// permit fabric-exportable memory (the H100 of the differential run of
// 2026-11-25; a simulated node here): HandleType falls back to POSIX file
// descriptors and logs why; asked for fabric handles, it fails saying so.
func TestHandleTypeFabricNotPermitted(t *testing.T) {
	b := needWorld(t, 1)
	dir := t.TempDir()
	proc := filepath.Join(dir, "devices")
	require.NoError(t, os.WriteFile(proc, []byte("Character devices:\n195 nvidia\n234 "+handletype.IMEXDevice+"\n"), 0o644))
	chans := filepath.Join(dir, "channels")
	require.NoError(t, os.Mkdir(chans, 0o755))
	require.NoError(t, os.WriteFile(filepath.Join(chans, "channel0"), nil, 0o600))
	saved := b.o
	t.Cleanup(func() { b.o = saved })
	b.o.probe = handletype.Probe{ProcDevices: proc, ChannelDir: chans}

	n := sim.New(sim.Config{Devices: 1, Fabric: true, FabricNotPermitted: true})
	defer n.Close()
	require.NoError(t, n.Init())
	before := len(worldLog.String())
	ht, why, err := b.HandleType(tctx(t, 30*time.Second), n, 0)
	require.NoError(t, err)
	assert.Equal(t, cuda.HandlePosixFD, ht)
	assert.True(t, strings.HasPrefix(why, "rank 0: device 0 reports fabric handles"), why)
	assert.Contains(t, why, "CUDA_ERROR_NOT_PERMITTED")
	logged := worldLog.String()[before:]
	assert.Contains(t, logged, "mpi: shareable handles: posix-fd")
	assert.Contains(t, logged, "does not permit memory exportable as fabric handles")
	assert.NoError(t, n.CheckNoLeaks())

	b.o.handleType = cuda.HandleFabric
	_, _, err = b.HandleType(tctx(t, 30*time.Second), n, 0)
	require.Error(t, err)
	assert.Contains(t, err.Error(), "fabric handles asked for (WithHandleType), but rank 0: device 0 reports fabric handles")
}
