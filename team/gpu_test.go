//go:build gpu

package team_test

// Tests of the team on real GPUs, UNICAST only. Build here, run on the GPU
// machine (2 or more GPUs; 4 on nvidia-h200-x4):
//
//	go test -c -tags gpu -o .devbin/team.test ./team
//	./.devbin/team.test -test.v -test.run GPU
//
// No cuMulticast* entry point is ever called: the teams are brought up with
// WithTransport(Unicast), and the driver is wrapped so that any multicast
// call fails the test without reaching the real driver (multicast on a
// shared NVSwitch fabric can take the host down).

import (
	"bytes"
	"context"
	"crypto/rand"
	"fmt"
	"log/slog"
	"os"
	"runtime"
	"slices"
	"sync"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/nvls-go/nvls/cuda"
	"github.com/nvls-go/nvls/internal/gputest"
	"github.com/nvls-go/nvls/internal/teamlink"
	"github.com/nvls-go/nvls/internal/unicastonly"
	"github.com/nvls-go/nvls/team"
)

// gpus loads the driver and returns up to max devices (ordinals from the
// driver), or virtual ranks on GPU 0 (gputest.Devices), or skips.
func gpus(t *testing.T, min, max int) (cuda.Driver, []cuda.Device) {
	t.Helper()
	lib, err := cuda.Load()
	if err != nil {
		t.Skipf("no usable CUDA driver: %v", err)
	}
	d := unicastonly.Driver{Driver: lib, OnRefuse: func(op string) { t.Errorf("%s called", op) }}
	devs, _ := gputest.Devices(t, lib, min, max)
	return d, devs
}

// sharing is team.WithSharedDevices where devs repeat a device, else no
// option.
func sharing(devs []cuda.Device) []team.Option {
	for i, a := range devs {
		if slices.Contains(devs[:i], a) {
			return []team.Option{team.WithSharedDevices()}
		}
	}
	return nil
}

// memWatch holds every device's primary context for the whole test (so
// that the team's retain and release do not create and destroy it) and
// reads cuMemGetInfo on a locked thread.
type memWatch struct {
	d    cuda.Driver
	devs []cuda.Device
	ctxs []cuda.Context
}

func watchMem(t *testing.T, d cuda.Driver, devs []cuda.Device) *memWatch {
	w := &memWatch{d: d, devs: devs}
	for _, dev := range devs {
		c, err := d.PrimaryCtxRetain(dev)
		require.NoError(t, err)
		w.ctxs = append(w.ctxs, c)
		t.Cleanup(func() { assert.NoError(t, d.PrimaryCtxRelease(dev)) })
	}
	w.warmUp(t)
	return w
}

// warmUp makes each context load whatever the driver loads lazily on the
// first memset and copies, so that it is in the baseline, not in the
// difference.
func (w *memWatch) warmUp(t *testing.T) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	host := make([]byte, 4096)
	for _, c := range w.ctxs {
		require.NoError(t, w.d.CtxSetCurrent(c))
		a, err := w.d.MemAlloc(8192)
		require.NoError(t, err)
		require.NoError(t, w.d.MemsetD8(a, 1, 8192))
		require.NoError(t, cuda.CopyHtoD(w.d, a, host))
		require.NoError(t, w.d.MemcpyDtoD(a+4096, a, 4096))
		require.NoError(t, cuda.CopyDtoH(w.d, host, a))
		require.NoError(t, w.d.CtxSynchronize())
		require.NoError(t, w.d.MemFree(a))
	}
	require.NoError(t, w.d.CtxSetCurrent(0))
}

func (w *memWatch) free(t *testing.T) []uint64 {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	out := make([]uint64, len(w.devs))
	for i, c := range w.ctxs {
		require.NoError(t, w.d.CtxSetCurrent(c))
		f, _, err := w.d.MemGetInfo()
		require.NoError(t, err)
		out[i] = f
	}
	require.NoError(t, w.d.CtxSetCurrent(0))
	return out
}

func logger() *slog.Logger {
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))
}

// checkPeerReads: every rank writes a distinct random pattern into its
// buffer; every rank reads every rank's buffer through its peer mapping
// with a device-to-device copy into a local scratch allocation, copies the
// scratch back to the host and compares.
func checkPeerReads(t *testing.T, teams []*team.Team, size uint64) {
	n := teams[0].Size()
	patterns := make([][]byte, n)
	for r := range patterns {
		patterns[r] = make([]byte, size)
		_, _ = rand.Read(patterns[r])
	}
	bufs := make([]team.Buffer, len(teams))
	for i, tm := range teams {
		b, err := tm.Alloc(size)
		require.NoError(t, err)
		bufs[i] = b
	}
	// Writes: each team's local ranks write their own pattern.
	var wg sync.WaitGroup
	errs := make([]error, len(teams))
	for i, tm := range teams {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = tm.Run(team.JobFunc(func(l int) error {
				return cuda.CopyHtoD(tm.Driver(), bufs[i].Ptr(l), patterns[tm.Rank(l)])
			}))
		}()
	}
	wg.Wait()
	for _, err := range errs {
		require.NoError(t, err)
	}
	// Reads through the peer mappings.
	for i, tm := range teams {
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[i] = tm.Run(team.JobFunc(func(l int) error {
				d := tm.Driver()
				me := tm.Rank(l)
				scratch, err := d.MemAlloc(size)
				if err != nil {
					return fmt.Errorf("rank %d: scratch: %w", me, err)
				}
				defer d.MemFree(scratch)
				host := make([]byte, size)
				for q := 0; q < n; q++ {
					for k := range host {
						host[k] = 0
					}
					if err := d.MemcpyDtoD(scratch, bufs[i].PeerPtr(l, q), size); err != nil {
						return fmt.Errorf("rank %d reads rank %d: %w", me, q, err)
					}
					if err := d.MemcpyDtoH(unsafe.Pointer(&host[0]), scratch, size); err != nil {
						return fmt.Errorf("rank %d: scratch to host: %w", me, err)
					}
					if !bytes.Equal(host, patterns[q]) {
						return fmt.Errorf("rank %d (device %d) reads a wrong copy of rank %d's buffer", me, tm.Device(l), q)
					}
				}
				return nil
			}))
		}()
	}
	wg.Wait()
	for _, err := range errs {
		require.NoError(t, err)
	}
	for i, tm := range teams {
		require.NoError(t, tm.Free(bufs[i]))
	}
	t.Logf("%d ranks: every rank read every rank's %d-byte buffer through its peer mapping", n, size)
}

func TestGPUUnicastTeam(t *testing.T) {
	d, devs := gpus(t, 2, 4)
	w := watchMem(t, d, devs)
	before := w.free(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	start := time.Now()
	tm, err := team.New(ctx, d, devs, append(sharing(devs), team.WithTransport(team.Unicast), team.WithWorkspaceSize(256<<20), team.WithLogger(logger()))...)
	require.NoError(t, err)
	t.Logf("team of %d GPUs up in %v: transport %v (%s); %v", tm.Size(), time.Since(start), tm.Transport(), tm.Reason(), tm.Footprint())
	require.Equal(t, team.Unicast, tm.Transport())
	assert.Zero(t, teamlink.Of(tm).MCBase(0))
	during := w.free(t)
	for i := range devs {
		t.Logf("device %d: %d bytes in use by the team", devs[i], int64(before[i])-int64(during[i]))
		assert.GreaterOrEqual(t, before[i]-during[i], teamlink.Of(tm).Layout().Size(), "device %d", devs[i])
	}
	checkPeerReads(t, []*team.Team{tm}, 64<<20)
	require.NoError(t, tm.Close())
	after := w.free(t)
	for i := range devs {
		assert.Equal(t, before[i], after[i], "device %d: cuMemGetInfo free before %d, after Close %d", devs[i], before[i], after[i])
	}
}

// asProcesses makes the in-process bootstrap report separate processes, so
// that NewRank exports and imports POSIX FDs as under mpirun.
type asProcesses struct{ team.Bootstrap }

func (asProcesses) InProcess() bool { return false }

// TestGPUUnicastTeamFDPath brings the team up rank by rank with NewRank
// over the POSIX-FD handle exchange (the multi-process path) in one
// process.
func TestGPUUnicastTeamFDPath(t *testing.T) {
	d, devs := gpus(t, 2, 4)
	w := watchMem(t, d, devs)
	before := w.free(t)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	boots := team.NewInProcess(len(devs))
	teams := make([]*team.Team, len(devs))
	errs := make([]error, len(devs))
	var wg sync.WaitGroup
	for r, dev := range devs {
		wg.Add(1)
		go func() {
			defer wg.Done()
			teams[r], errs[r] = team.NewRank(ctx, d, dev, asProcesses{boots[r]},
				append(sharing(devs), team.WithTransport(team.Unicast), team.WithWorkspaceSize(64<<20), team.WithLogger(logger()))...)
		}()
	}
	wg.Wait()
	for r, err := range errs {
		require.NoError(t, err, "rank %d", r)
	}
	checkPeerReads(t, teams, 16<<20)
	for _, tm := range teams {
		require.NoError(t, tm.Close())
	}
	for _, b := range boots {
		require.NoError(t, b.Close())
	}
	after := w.free(t)
	for i := range devs {
		assert.Equal(t, before[i], after[i], "device %d: cuMemGetInfo free before %d, after Close %d", devs[i], before[i], after[i])
	}
}
