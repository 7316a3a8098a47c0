package team

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/nvls-go/nvls/cuda"
	"github.com/nvls-go/nvls/cuda/sim"
)

// accessRecorder records every cuMemSetAccess descriptor list.
type accessRecorder struct {
	cuda.Driver
	mu    sync.Mutex
	lists [][]cuda.AccessDesc
}

func (a *accessRecorder) MemSetAccess(p cuda.DevicePtr, size uint64, desc []cuda.AccessDesc) error {
	a.mu.Lock()
	a.lists = append(a.lists, append([]cuda.AccessDesc(nil), desc...))
	a.mu.Unlock()
	return a.Driver.MemSetAccess(p, size, desc)
}

// checkNoDuplicateAccess: no descriptor list names a device twice.
func (a *accessRecorder) checkNoDuplicateAccess(t *testing.T) {
	t.Helper()
	a.mu.Lock()
	defer a.mu.Unlock()
	require.NotEmpty(t, a.lists)
	for _, l := range a.lists {
		seen := map[int32]bool{}
		for _, d := range l {
			assert.False(t, seen[d.Location.ID], "cuMemSetAccess names device %d twice: %v", d.Location.ID, l)
			seen[d.Location.ID] = true
		}
	}
}

func noMulticastCalls(t *testing.T, node *sim.Node) {
	t.Helper()
	for _, c := range node.Calls() {
		assert.False(t, strings.HasPrefix(c.Op, "cuMulticast"), "multicast entry point called: %v", c)
	}
}

// TestSharedDevices: 2 and 3 ranks on one GPU, and 4 ranks on 2 GPUs
// (each shared by 2), brought up in one process with auto transport:
// unicast with a reason that names the shared devices, no cuMulticast*
// call, one primary context reference per rank, no cuMemSetAccess list
// naming a device twice, peer access asked only between distinct devices,
// every rank's writes reach every rank, and nothing leaks after Close.
func TestSharedDevices(t *testing.T) {
	for _, tc := range []struct {
		name     string
		gpus     int
		devs     []cuda.Device
		perDev   []int // RanksOnDevice per rank
		inReason []string
	}{
		{"2 ranks on 1 GPU", 1, []cuda.Device{0, 0}, []int{2, 2}, []string{"ranks [0 1] on device 0"}},
		{"3 ranks on 1 GPU", 1, []cuda.Device{0, 0, 0}, []int{3, 3, 3}, []string{"ranks [0 1 2] on device 0"}},
		{"4 ranks on 2 GPUs", 2, []cuda.Device{0, 1, 0, 1}, []int{2, 2, 2, 2}, []string{"ranks [0 2] on device 0", "ranks [1 3] on device 1"}},
		{"3 ranks on 2 GPUs", 2, []cuda.Device{1, 0, 1}, []int{2, 1, 2}, []string{"ranks [0 2] on device 1"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			node := newNode(t, sim.Config{Devices: tc.gpus})
			rec := &accessRecorder{Driver: node}
			var logs bytes.Buffer
			l := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo}))
			tm, err := New(testCtx(t), rec, tc.devs, WithSharedDevices(), WithWorkspaceSize(smallData), WithLogger(l))
			require.NoError(t, err)
			n := len(tc.devs)
			assert.Equal(t, Unicast, tm.Transport())
			assert.Contains(t, tm.Reason(), "auto: shared devices (WithSharedDevices)")
			for _, s := range tc.inReason {
				assert.Contains(t, tm.Reason(), s)
			}
			assert.Nil(t, tm.Fallback())
			assert.Equal(t, n, tm.Size())
			assert.Equal(t, n, tm.NumLocal())
			maxOn := 0
			for r := range n {
				assert.Equal(t, tc.devs[r], tm.Device(r))
				assert.Equal(t, tc.perDev[r], tm.RanksOnDevice(r), "rank %d", r)
				maxOn = max(maxOn, tc.perDev[r])
				assert.Zero(t, tm.mcBaseOf(r))
			}
			assert.Equal(t, maxOn, tm.maxRanksOnDevice())
			assert.Contains(t, logs.String(), "team: shared devices")
			assert.Contains(t, logs.String(), "ranks_on_device=")

			// One worker per rank, each holding one reference to its
			// device's primary context (ranks of a device share it).
			assert.Equal(t, n, node.Live().RetainedContexts)
			assert.Len(t, node.CallsOf("cuDevicePrimaryCtxRetain"), n)
			for r := range n {
				for q := range n {
					if tc.devs[r] == tc.devs[q] {
						assert.Equal(t, tm.Context(r), tm.Context(q), "ranks %d and %d share device %d's primary context", r, q, tc.devs[r])
					}
				}
			}
			// cuDeviceCanAccessPeer only between distinct devices.
			for _, c := range node.CallsOf("cuDeviceCanAccessPeer") {
				assert.NotEqual(t, uint64(c.Device), c.Arg, "peer access asked of a device for itself: %v", c)
			}
			if tc.gpus == 1 {
				assert.Empty(t, node.CallsOf("cuDeviceCanAccessPeer"))
			}
			// Every rank its own workspace: n allocations, n UC bases per
			// rank, all distinct within a rank.
			assert.Len(t, node.CallsOf("cuMemCreate"), n)
			for r := range n {
				b := tm.ucBases(r)
				seen := map[cuda.DevicePtr]bool{}
				for q := range n {
					require.NotZero(t, b[q])
					assert.False(t, seen[b[q]], "rank %d maps two ranks at %#x", r, b[q])
					seen[b[q]] = true
				}
			}
			checkPeerWrites(t, node, tm)
			rec.checkNoDuplicateAccess(t)

			node.ResetCalls()
			require.NoError(t, tm.Close())
			assert.Len(t, node.CallsOf("cuDevicePrimaryCtxRelease"), n)
			assert.Zero(t, node.Live().RetainedContexts)
			noMulticastCalls(t, node)
			require.NoError(t, node.CheckNoLeaks())
		})
	}
}

// TestSharedDevicesNoMulticastCall: the whole life of a shared team,
// bring-up to Close, makes no cuMulticast* call (not even the queries of
// the granularity), in auto mode too.
func TestSharedDevicesNoMulticastCall(t *testing.T) {
	node := newNode(t, sim.Config{Devices: 1})
	tm, err := New(testCtx(t), node, []cuda.Device{0, 0}, WithSharedDevices(), WithWorkspaceSize(smallData), quiet())
	require.NoError(t, err)
	require.NoError(t, tm.Close())
	assert.NotEmpty(t, node.CallsOf("cuMemCreate"))
	noMulticastCalls(t, node)
	require.NoError(t, node.CheckNoLeaks())
}

// TestSharedDevicesRefused: a repeated device without the option, and
// multicast asked for with it (option or environment), are errors before
// any driver call.
func TestSharedDevicesRefused(t *testing.T) {
	t.Run("repeat without the option", func(t *testing.T) {
		node := newNode(t, sim.Config{Devices: 2})
		_, err := New(testCtx(t), node, []cuda.Device{0, 1, 0}, WithWorkspaceSize(smallData), quiet())
		require.ErrorIs(t, err, ErrBadDevices)
		assert.Contains(t, err.Error(), "device 0 given twice (ranks 0 and 2)")
		assert.Contains(t, err.Error(), "WithSharedDevices")
		assert.Zero(t, node.CallCount())
	})
	for _, tc := range []struct {
		name string
		env  map[string]string
		opts []Option
		src  string
	}{
		{"option", nil, []Option{WithTransport(Multicast)}, "WithTransport(multicast)"},
		{"environment", map[string]string{EnvTransport: "multicast"}, nil, "NVLS_TRANSPORT=multicast"},
	} {
		t.Run("multicast by "+tc.name, func(t *testing.T) {
			for k, v := range tc.env {
				t.Setenv(k, v)
			}
			node := newNode(t, sim.Config{Devices: 2})
			for _, devs := range [][]cuda.Device{{0, 0}, {0, 1}} {
				_, err := New(testCtx(t), node, devs, append([]Option{WithSharedDevices(), WithWorkspaceSize(smallData), quiet()}, tc.opts...)...)
				require.ErrorIs(t, err, ErrMulticastUnsupported, "devices %v", devs)
				assert.Contains(t, err.Error(), tc.src)
				assert.Contains(t, err.Error(), "WithSharedDevices")
				assert.Zero(t, node.CallCount(), "devices %v: a driver call was made", devs)
			}
		})
	}
	t.Run("unicast asked", func(t *testing.T) {
		node := newNode(t, sim.Config{Devices: 1})
		tm, err := New(testCtx(t), node, []cuda.Device{0, 0}, WithSharedDevices(), WithTransport(Unicast), WithWorkspaceSize(smallData), quiet())
		require.NoError(t, err)
		assert.Equal(t, Unicast, tm.Transport())
		assert.Equal(t, "asked by WithTransport(unicast) on every rank", tm.Reason())
		assert.Equal(t, 2, tm.RanksOnDevice(1))
		require.NoError(t, tm.Close())
		require.NoError(t, node.CheckNoLeaks())
	})
}

// TestSharedDevicesOptionWithoutSharing: the option on a team of distinct
// devices still means unicast (a team that may share devices never uses
// multicast), and says so; every rank is alone on its device.
func TestSharedDevicesOptionWithoutSharing(t *testing.T) {
	node := newNode(t, sim.Config{Devices: 2})
	tm, err := New(testCtx(t), node, devices(2), WithSharedDevices(), WithWorkspaceSize(smallData), quiet())
	require.NoError(t, err)
	assert.Equal(t, Unicast, tm.Transport())
	assert.Contains(t, tm.Reason(), "no device is shared")
	assert.Equal(t, 1, tm.maxRanksOnDevice())
	assert.Equal(t, 1, tm.RanksOnDevice(0))
	require.NoError(t, tm.Close())
	noMulticastCalls(t, node)
	require.NoError(t, node.CheckNoLeaks())
}

// TestSharedDevicesPeerAccessStillChecked: ranks on distinct devices still
// need peer access between them.
func TestSharedDevicesPeerAccessStillChecked(t *testing.T) {
	node := newNode(t, sim.Config{Devices: 2, NoPeer: [][2]int{{0, 1}}})
	_, err := New(testCtx(t), node, []cuda.Device{0, 0, 1}, WithSharedDevices(), WithWorkspaceSize(smallData), quiet())
	require.ErrorIs(t, err, ErrNoPeerAccess)
	assert.Contains(t, err.Error(), "rank 0 (device 0")
	assert.Contains(t, err.Error(), "rank 2 (device 1")
	assert.NotRegexp(t, `rank 0 \(device 0[^)]*\) cannot access rank 1 `, err.Error(), "ranks of one device reach each other")
	assert.NotRegexp(t, `rank 1 \(device 0[^)]*\) cannot access rank 0 `, err.Error(), "ranks of one device reach each other")
	require.NoError(t, node.CheckNoLeaks())
}

// TestSharedDevicesDecide: the cross-rank rules (ranks of separate
// processes each pass their own options).
func TestSharedDevicesDecide(t *testing.T) {
	shared := func(n int, pci ...int) []facts {
		all := mkFacts(n)
		for r := range all {
			all[r].SharedDevices = true
			all[r].PCI = string(rune('A' + pci[r]))
			all[r].Device = cuda.Device(pci[r])
		}
		return all
	}
	d, err := decide(shared(4, 0, 1, 0, 1), false)
	require.NoError(t, err)
	assert.Equal(t, Unicast, d.transport)
	assert.False(t, d.auto)
	assert.Equal(t, []int{2, 2, 2, 2}, d.onDevice)
	assert.Equal(t, "auto: shared devices (WithSharedDevices): ranks [0 2] on device 0 (A), ranks [1 3] on device 1 (B); a device joins a multicast object once, so a team with shared devices is unicast", d.reason)

	// A rank of a shared device without the option.
	all := shared(3, 0, 0, 1)
	all[1].SharedDevices = false
	_, err = decide(all, false)
	require.ErrorIs(t, err, ErrBadDevices)
	assert.Contains(t, err.Error(), "ranks [0 1] use the same GPU (device 0, A)")
	assert.Contains(t, err.Error(), "rank(s) [1] did not")

	// The option on one rank only, no device shared: unicast for all.
	all = mkFacts(3)
	all[2].SharedDevices = true
	d, err = decide(all, false)
	require.NoError(t, err)
	assert.Equal(t, Unicast, d.transport)
	assert.Equal(t, []int{1, 1, 1}, d.onDevice)
	assert.Contains(t, d.reason, "WithSharedDevices on rank(s) [2]")

	// ... and multicast asked by another rank is an error.
	all[0].Request, all[0].RequestSrc = Multicast, "NVLS_TRANSPORT=multicast"
	_, err = decide(all, false)
	require.ErrorIs(t, err, ErrMulticastUnsupported)
	assert.Contains(t, err.Error(), "NVLS_TRANSPORT=multicast on rank(s) [0]")

	// Without the option anywhere: the old refusal, unchanged.
	all = mkFacts(2)
	all[1].PCI = all[0].PCI
	_, err = decide(all, false)
	require.ErrorIs(t, err, ErrBadDevices)
}

// newSharedRanks brings up one NewRank team per entry of devs (rank r on
// devs[r]), on goroutines, each with opts(r); across processes (FDs)
// unless inProcess.
func newSharedRanks(ctx context.Context, d cuda.Driver, devs []cuda.Device, inProcess bool, opts func(r int) []Option) (ranksTeam, []error) {
	n := len(devs)
	boots := NewInProcess(n)
	teams := make(ranksTeam, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r := range n {
		var b Bootstrap = boots[r]
		if !inProcess {
			b = procBoot{b}
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			teams[r], errs[r] = NewRank(ctx, d, devs[r], b, opts(r)...)
		}()
	}
	wg.Wait()
	for _, b := range boots {
		_ = b.Close()
	}
	return teams, errs
}

// TestSharedDevicesNewRank: ranks brought up one by one (as under MPI)
// share devices too: over FDs (as across processes) and by value, 3 ranks
// on 1 GPU and 4 on 2; each rank has its own worker and context
// reference, imports every peer's workspace (its own device's included),
// and Close leaves nothing, FDs included.
func TestSharedDevicesNewRank(t *testing.T) {
	for _, inProcess := range []bool{false, true} {
		for _, devs := range [][]cuda.Device{{0, 0, 0}, {0, 1, 1, 0}} {
			t.Run(fmt.Sprintf("in-process %v devices %v", inProcess, devs), func(t *testing.T) {
				before := openFDs(t)
				gpus := 0
				for _, d := range devs {
					gpus = max(gpus, int(d)+1)
				}
				node := newNode(t, sim.Config{Devices: gpus})
				n := len(devs)
				teams, errs := newSharedRanks(testCtx(t), node, devs, inProcess, func(int) []Option {
					return []Option{WithSharedDevices(), WithWorkspaceSize(smallData), quiet()}
				})
				require.NoError(t, rootCause(errs))
				assert.Equal(t, Unicast, teams.Transport())
				assert.Contains(t, teams.Reason(), "auto: shared devices (WithSharedDevices)")
				for r, tm := range teams {
					assert.Equal(t, 1, tm.NumLocal())
					assert.Equal(t, r, tm.Rank(0))
					for q := range n {
						want := 0
						for _, d := range devs {
							if d == devs[q] {
								want++
							}
						}
						assert.Equal(t, want, tm.RanksOnDevice(q), "rank %d's view of rank %d", r, q)
					}
				}
				// Every workspace exported once and imported by every
				// other rank, whatever its device.
				assert.Len(t, node.CallsOf("cuMemExportToShareableHandle"), n)
				assert.Len(t, node.CallsOf("cuMemImportFromShareableHandle"), n*(n-1))
				assert.Equal(t, n, node.Live().RetainedContexts)
				checkPeerWrites(t, node, teams...)
				require.NoError(t, teams.Close())
				noMulticastCalls(t, node)
				require.NoError(t, node.CheckNoLeaks())
				assert.LessOrEqual(t, openFDs(t), before, "FDs leaked")
			})
		}
	}
}

// TestSharedDevicesNewRankOptionMissing: a rank of a shared device that
// did not pass the option makes every rank fail with the same error.
func TestSharedDevicesNewRankOptionMissing(t *testing.T) {
	node := newNode(t, sim.Config{Devices: 1})
	teams, errs := newSharedRanks(testCtx(t), node, []cuda.Device{0, 0}, false, func(r int) []Option {
		opts := []Option{WithWorkspaceSize(smallData), quiet()}
		if r == 0 {
			opts = append(opts, WithSharedDevices())
		}
		return opts
	})
	for r, err := range errs {
		require.ErrorIs(t, err, ErrBadDevices, "rank %d", r)
		assert.Contains(t, err.Error(), "rank(s) [1] did not", "rank %d", r)
		assert.Nil(t, teams[r])
	}
	require.NoError(t, node.CheckNoLeaks())
}

// TestFaultAtEverySetupCallSharedDevices: a fault at each driver call of a
// shared team's bring-up (3 ranks on 2 GPUs) fails it naming the step,
// rank and call, and leaks nothing (context references included).
func TestFaultAtEverySetupCallSharedDevices(t *testing.T) {
	faultEveryCall(t, sim.Config{Devices: 2}, cuda.ErrorOutOfMemory, false, func(node *sim.Node) (closer, error) {
		tm, err := New(testCtx(t), node, []cuda.Device{0, 1, 0}, WithSharedDevices(), WithWorkspaceSize(smallData), quiet())
		if err != nil {
			return nil, err
		}
		return tm, nil
	})
}

// TestFaultAtEveryCloseCallSharedDevices: a fault at each driver call of
// a shared team's Close (3 ranks on 1 GPU) is reported, and the retry
// still frees everything: the primary context, which the ranks share, is
// released once per rank, never once too often.
func TestFaultAtEveryCloseCallSharedDevices(t *testing.T) {
	devs := []cuda.Device{0, 0, 0}
	opts := []Option{WithSharedDevices(), WithWorkspaceSize(smallData), quiet()}
	node := newNode(t, sim.Config{Devices: 1})
	tm, err := New(testCtx(t), node, devs, opts...)
	require.NoError(t, err)
	node.ResetCalls()
	require.NoError(t, tm.Close())
	total := node.CallCount()
	require.NoError(t, node.CheckNoLeaks())
	for nth := 1; nth <= total; nth++ {
		node, _, failed, err := closeWithFault(t, 1, devs, opts, nth)
		assert.ErrorIs(t, err, &cuda.Error{Code: cuda.ErrorUnknown})
		assert.Zero(t, node.Live().RetainedContexts, "call %d (%s)", nth, failed)
		releases := len(devs)
		if failed == "cuDevicePrimaryCtxRelease" {
			releases++ // the worker's retry
		}
		assert.Len(t, node.CallsOf("cuDevicePrimaryCtxRelease"), releases, "call %d (%s): one release per rank, plus the retry of a failed one", nth, failed)
		assert.NoError(t, node.CheckNoLeaks(), "call %d (%s) leaked; Close said %v", nth, failed, err)
		_ = node.Close()
	}
}
