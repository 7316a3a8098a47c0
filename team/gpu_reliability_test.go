//go:build gpu

package team_test

// Reliability tests of the bring-up on real GPUs, with no cuMulticast*
// entry point ever reaching the driver. Build here, run on the GPU machine
// (2 or more GPUs):
//
//	go test -c -tags gpu -o .devbin/team.test ./team
//	./.devbin/team.test -test.v -test.run 'GPU(FabricFallback|SetupDeadline)'

import (
	"context"
	"fmt"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/nvls-go/nvls/cuda"
	"github.com/nvls-go/nvls/team"
)

// fabricDown answers every multicast entry point with
// CUDA_ERROR_SYSTEM_NOT_READY, as a node whose Fabric Manager is not
// running does, without calling the driver.
type fabricDown struct {
	cuda.Driver
	mu    sync.Mutex
	calls []string
}

func (d *fabricDown) down(op string) error {
	d.mu.Lock()
	d.calls = append(d.calls, op)
	d.mu.Unlock()
	return cuda.NewError(op, cuda.ErrorSystemNotReady, "answered by the test's fabricDown wrapper; the driver was not called")
}

func (d *fabricDown) MulticastGetGranularity(*cuda.MulticastProp, cuda.GranularityFlags) (uint64, error) {
	return 0, d.down("cuMulticastGetGranularity")
}
func (d *fabricDown) MulticastCreate(*cuda.MulticastProp) (cuda.MemHandle, error) {
	return 0, d.down("cuMulticastCreate")
}
func (d *fabricDown) MulticastAddDevice(cuda.MemHandle, cuda.Device) error {
	return d.down("cuMulticastAddDevice")
}
func (d *fabricDown) MulticastBindMem(cuda.MemHandle, uint64, cuda.MemHandle, uint64, uint64) error {
	return d.down("cuMulticastBindMem")
}
func (d *fabricDown) MulticastBindAddr(cuda.MemHandle, uint64, cuda.DevicePtr, uint64) error {
	return d.down("cuMulticastBindAddr")
}
func (d *fabricDown) MulticastUnbind(cuda.MemHandle, cuda.Device, uint64, uint64) error {
	return d.down("cuMulticastUnbind")
}

// TestGPUFabricFallback: on devices that report multicast support, auto
// mode chooses multicast; the (wrapped) driver then says the fabric is not
// ready at the first multicast call, and every rank falls back to a
// working unicast team that leaves no GPU memory behind.
func TestGPUFabricFallback(t *testing.T) {
	d, devs := gpus(t, 2, 4)
	if off, _ := cuda.MulticastDisabledByEnv(); off {
		t.Skipf("%s=%s: auto mode would not try multicast, so there is nothing to fall back from", cuda.EnvNVLSEnable, os.Getenv(cuda.EnvNVLSEnable))
	}
	if v := os.Getenv(team.EnvTransport); v != "" && !strings.EqualFold(v, "auto") {
		t.Skipf("%s=%s: the transport is not chosen automatically", team.EnvTransport, v)
	}
	for _, dev := range devs {
		ok, err := d.DeviceAttribute(cuda.AttrMulticastSupported, dev)
		require.NoError(t, err)
		if ok == 0 {
			t.Skipf("device %d reports no multicast support: auto mode chooses unicast without trying", dev)
		}
	}
	fd := &fabricDown{Driver: d}
	w := watchMem(t, d, devs)
	before := w.free(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	tm, err := team.New(ctx, fd, devs, team.WithWorkspaceSize(64<<20), team.WithLogger(logger()))
	require.NoError(t, err)
	t.Logf("transport %v: %s", tm.Transport(), tm.Reason())
	require.Equal(t, team.Unicast, tm.Transport())
	assert.Equal(t, "auto: multicast failed at query multicast granularity on rank 0 (cuMulticastGetGranularity: CUDA_ERROR_SYSTEM_NOT_READY (802)); fell back to unicast", tm.Reason())
	require.NotNil(t, tm.Fallback())
	assert.ErrorIs(t, tm.Fallback(), team.ErrFabricNotReady)
	fd.mu.Lock()
	calls := append([]string(nil), fd.calls...)
	fd.mu.Unlock()
	assert.Len(t, calls, len(devs), "one granularity query per rank, and no other multicast call: %v", calls)
	for _, c := range calls {
		assert.Equal(t, "cuMulticastGetGranularity", c)
	}
	assert.Zero(t, tm.Footprint().MulticastVA)
	checkPeerReads(t, []*team.Team{tm}, 16<<20)
	require.NoError(t, tm.Close())
	after := w.free(t)
	for i := range devs {
		assert.Equal(t, before[i], after[i], "device %d: cuMemGetInfo free before %d, after Close %d", devs[i], before[i], after[i])
	}
}

// hangMemCreate blocks the first cuMemCreate on one device until release
// is closed.
type hangMemCreate struct {
	cuda.Driver
	dev     cuda.Device
	once    sync.Once
	entered chan struct{}
	release chan struct{}
}

func (h *hangMemCreate) MemCreate(size uint64, prop *cuda.AllocationProp) (cuda.MemHandle, error) {
	if cuda.Device(prop.Location.ID) == h.dev {
		hang := false
		h.once.Do(func() { hang = true })
		if hang {
			close(h.entered)
			<-h.release
		}
	}
	return h.Driver.MemCreate(size, prop)
}

// TestGPUSetupDeadline: one rank hangs in cuMemCreate; New returns at the
// setup timeout naming that rank, and once the hung call returns, every
// byte of GPU memory the team took comes back (the hung rank's cleanup
// runs in the background).
func TestGPUSetupDeadline(t *testing.T) {
	d, devs := gpus(t, 2, 4)
	if sharing(devs) != nil {
		t.Skip("virtual ranks: the hung cuMemCreate picks its rank by device, so the ranks need devices of their own")
	}
	last := devs[len(devs)-1]
	h := &hangMemCreate{Driver: d, dev: last, entered: make(chan struct{}), release: make(chan struct{})}
	w := watchMem(t, d, devs)
	before := w.free(t)
	const timeout = 3 * time.Second
	start := time.Now()
	_, err := team.New(context.Background(), h, devs, team.WithTransport(team.Unicast), team.WithWorkspaceSize(64<<20),
		team.WithSetupTimeout(timeout), team.WithLogger(logger()))
	elapsed := time.Since(start)
	select {
	case <-h.entered:
	default:
		t.Errorf("rank %d never reached its cuMemCreate", len(devs)-1)
	}
	close(h.release)
	require.Error(t, err)
	t.Logf("New returned after %v: %v", elapsed, err)
	assert.Less(t, elapsed, timeout+2*time.Second)
	assert.ErrorIs(t, err, team.ErrPeerMissing)
	assert.ErrorIs(t, err, context.DeadlineExceeded)
	assert.Contains(t, err.Error(), fmt.Sprintf("rank(s) [%d]", len(devs)-1))
	deadline := time.Now().Add(30 * time.Second)
	for {
		after := w.free(t)
		same := true
		for i := range devs {
			same = same && after[i] == before[i]
		}
		if same {
			t.Logf("memory back %v after the hung call returned", time.Since(start)-elapsed)
			return
		}
		if time.Now().After(deadline) {
			for i := range devs {
				assert.Equal(t, before[i], after[i], "device %d: cuMemGetInfo free before %d, 30 s after the hung call returned %d", devs[i], before[i], after[i])
			}
			return
		}
		time.Sleep(50 * time.Millisecond)
	}
}
