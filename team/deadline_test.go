package team

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/nvls-go/nvls/cuda"
	"github.com/nvls-go/nvls/cuda/sim"
)

// hangOn wraps d so that the first call of op on dev blocks until release
// is closed; entered is closed when it started blocking.
func hangOn(d cuda.Driver, op string, dev cuda.Device) (drv *hookDriver, entered, release chan struct{}) {
	entered, release = make(chan struct{}), make(chan struct{})
	var once sync.Once
	drv = newHookDriver(d, op, func(got cuda.Device) error {
		if got != dev {
			return nil
		}
		hang := false
		once.Do(func() { hang = true })
		if hang {
			close(entered)
			<-release
		}
		return nil
	})
	return drv, entered, release
}

// TestSetupDeadlineNamesHungRank: one rank hangs inside a driver call of
// the bring-up. New returns once the setup timeout passed, with an error
// naming that rank (ErrPeerMissing, context.DeadlineExceeded); the other
// ranks' resources are freed at once, the hung rank's once its call
// returns; nothing leaks.
func TestSetupDeadlineNamesHungRank(t *testing.T) {
	const timeout = 300 * time.Millisecond
	for _, tc := range []struct {
		name string
		op   string
		dev  int
		opts []Option
		env  bool // the timeout from NVLS_SETUP_TIMEOUT instead of the option
	}{
		{"unicast/memory on rank 2", "cuMemCreate", 2, []Option{WithTransport(Unicast)}, false},
		{"multicast/bind on the creator", "cuMulticastBindMem", 0, nil, false},
		{"multicast/add on rank 1", "cuMulticastAddDevice", 1, nil, true},
		{"multicast/create", "cuMulticastCreate", 0, nil, false},
		{"multicast/bind on rank 3", "cuMulticastBindMem", 3, []Option{WithTransport(Multicast)}, false},
	} {
		t.Run(tc.name, func(t *testing.T) {
			node := newNode(t, sim.Config{Devices: 4})
			drv, entered, release := hangOn(node, tc.op, cuda.Device(tc.dev))
			defer func() {
				select {
				case <-release:
				default:
					close(release)
				}
			}()
			opts := append([]Option{WithWorkspaceSize(smallData), quiet()}, tc.opts...)
			// How the error names the deadline (issue 24).
			named := "(setup deadline WithSetupTimeout(300ms))"
			if tc.env {
				t.Setenv(EnvSetupTimeout, timeout.String())
				named = "(setup deadline NVLS_SETUP_TIMEOUT=300ms)"
			} else {
				opts = append(opts, WithSetupTimeout(timeout))
			}
			start := time.Now()
			tm, err := New(context.Background(), drv, devices(4), opts...)
			elapsed := time.Since(start)
			require.Error(t, err)
			require.Nil(t, tm)
			<-entered
			t.Logf("New returned after %v: %v", elapsed, err)
			assert.GreaterOrEqual(t, elapsed, timeout-50*time.Millisecond, "returned before the deadline")
			assert.Less(t, elapsed, timeout+2*time.Second, "did not return within the deadline")
			assert.ErrorIs(t, err, ErrPeerMissing)
			assert.ErrorIs(t, err, context.DeadlineExceeded)
			var mr *MissingRanksError
			require.ErrorAs(t, err, &mr)
			assert.Equal(t, []int{tc.dev}, mr.Missing)
			assert.Contains(t, err.Error(), fmt.Sprintf("rank(s) [%d] (device(s) [%d]) still inside a driver call", tc.dev, tc.dev))
			assert.Contains(t, err.Error(), "did not arrive: context deadline exceeded "+named)
			assert.NotContains(t, err.Error(), "caller's")

			// The other ranks' workspaces are already gone (the creator's
			// multicast object, when another rank hangs, may wait).
			live := node.Live()
			for d, b := range live.DeviceBytes {
				if d != tc.dev {
					assert.Zero(t, b, "device %d still holds memory while rank %d hangs", d, tc.dev)
				}
			}
			close(release)
			require.Eventually(t, func() bool { return node.CheckNoLeaks() == nil }, 10*time.Second, 5*time.Millisecond,
				"leaked after the hung call returned: %v", node.CheckNoLeaks())
		})
	}
}

// TestSetupDeadlineFromContext: the caller's context bounds New the same
// way when it ends first.
func TestSetupDeadlineFromContext(t *testing.T) {
	node := newNode(t, sim.Config{Devices: 2})
	drv, _, release := hangOn(node, "cuMemCreate", 1)
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	start := time.Now()
	_, err := New(ctx, drv, devices(2), WithWorkspaceSize(smallData), WithTransport(Unicast), quiet())
	assert.Less(t, time.Since(start), 2*time.Second)
	require.ErrorIs(t, err, context.DeadlineExceeded)
	var mr *MissingRanksError
	require.ErrorAs(t, err, &mr)
	assert.Equal(t, []int{1}, mr.Missing)
	// The caller's deadline is named as such, not the setup deadline.
	assert.Contains(t, err.Error(), "did not arrive: context deadline exceeded (the caller's context deadline, earlier than the setup deadline of 1m0s)")
	assert.NotContains(t, err.Error(), "(setup deadline")
	close(release)
	require.Eventually(t, func() bool { return node.CheckNoLeaks() == nil }, 10*time.Second, 5*time.Millisecond)
}

// TestNewRankSetupTimeout: NewRank's exchanges take the setup timeout
// when one is given, so a rank that never comes is named by the others;
// the error names that deadline, or the caller's where no setup timeout
// was given.
func TestNewRankSetupTimeout(t *testing.T) {
	for _, tc := range []struct {
		name  string
		opt   []Option
		ctx   time.Duration // the caller's context's timeout, or 0
		named string
	}{
		{"option", []Option{WithSetupTimeout(200 * time.Millisecond)}, 0, "(setup deadline WithSetupTimeout(200ms))"},
		{"caller", nil, 200 * time.Millisecond, "(the caller's context deadline)"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			node := newNode(t, sim.Config{Devices: 3})
			boots := NewInProcess(3)
			errs := make([]error, 2)
			var wg sync.WaitGroup
			start := time.Now()
			for r := 0; r < 2; r++ { // rank 2 never comes
				wg.Add(1)
				go func() {
					defer wg.Done()
					ctx := context.Background()
					if tc.ctx > 0 {
						var cancel context.CancelFunc
						ctx, cancel = context.WithTimeout(ctx, tc.ctx)
						defer cancel()
					}
					tm, err := NewRank(ctx, node, cuda.Device(r), boots[r], append([]Option{WithWorkspaceSize(smallData), quiet()}, tc.opt...)...)
					if tm != nil {
						_ = tm.Close()
					}
					errs[r] = err
				}()
			}
			wg.Wait()
			assert.Less(t, time.Since(start), 2*time.Second)
			for r, err := range errs {
				require.ErrorIs(t, err, ErrPeerMissing, "rank %d", r)
				require.ErrorIs(t, err, context.DeadlineExceeded, "rank %d", r)
				var mr *MissingRanksError
				require.ErrorAs(t, err, &mr)
				assert.Equal(t, []int{2}, mr.Missing)
				assert.True(t, strings.HasSuffix(err.Error(), "context deadline exceeded "+tc.named), "rank %d: %v", r, err)
			}
			require.NoError(t, node.CheckNoLeaks())
		})
	}
}

// TestSetupDeadlineNamed: a bring-up step that fails because the setup
// deadline passed names it, with where it came from (issue 24:
// NVLS_SETUP_TIMEOUT=1ns said only "bootstrap: AllGather #0: context
// deadline exceeded"); the error still matches
// context.DeadlineExceeded. AllGather after the bring-up does the same.
func TestSetupDeadlineNamed(t *testing.T) {
	node := newNode(t, sim.Config{Devices: 2})
	for _, tc := range []struct {
		env   string
		opts  []Option
		named string
	}{
		{"1ns", nil, "(setup deadline NVLS_SETUP_TIMEOUT=1ns)"},
		{" 0.000000001 ", nil, "(setup deadline NVLS_SETUP_TIMEOUT=0.000000001 (1ns))"},
		{"", []Option{WithSetupTimeout(time.Nanosecond)}, "(setup deadline WithSetupTimeout(1ns))"},
		{"90s", []Option{WithSetupTimeout(time.Nanosecond)}, "(setup deadline WithSetupTimeout(1ns))"},
	} {
		t.Setenv(EnvSetupTimeout, tc.env)
		_, err := New(testCtx(t), node, devices(2), append([]Option{WithWorkspaceSize(smallData), quiet()}, tc.opts...)...)
		require.ErrorIs(t, err, context.DeadlineExceeded, "%q", tc.env)
		assert.True(t, strings.HasSuffix(err.Error(), "context deadline exceeded "+tc.named), "%q: %v", tc.env, err)
		assert.Contains(t, err.Error(), "team: rank ")
		require.NoError(t, node.CheckNoLeaks())
	}

	t.Setenv(EnvSetupTimeout, "")
	tm, err := New(testCtx(t), node, devices(2), WithWorkspaceSize(smallData), quiet())
	require.NoError(t, err)
	defer func() { require.NoError(t, tm.Close()) }()
	assert.Equal(t, "1m0s, the default; NVLS_SETUP_TIMEOUT or WithSetupTimeout sets it", tm.setupTimeoutSrc)
	// The caller's context, ended: named as the caller's.
	done, cancel := context.WithTimeout(context.Background(), -time.Second)
	defer cancel()
	_, err = tm.AllGather(done, []byte{1})
	require.ErrorIs(t, err, context.DeadlineExceeded)
	assert.True(t, strings.HasSuffix(err.Error(), "context deadline exceeded (the caller's context deadline, earlier than the setup deadline of 1m0s)"), err.Error())
}

// TestAllGatherSetupDeadlineNamed: AllGather's own deadline (the setup
// timeout) is named when it passes.
func TestAllGatherSetupDeadlineNamed(t *testing.T) {
	node := newNode(t, sim.Config{Devices: 2})
	tm, err := New(testCtx(t), node, devices(2), WithWorkspaceSize(smallData), quiet(), WithSetupTimeout(30*time.Second))
	require.NoError(t, err)
	defer func() { require.NoError(t, tm.Close()) }()
	assert.Equal(t, "WithSetupTimeout(30s)", tm.setupTimeoutSrc)
	// As if the option had said 1ns (the bring-up would not have passed).
	tm.setupTimeout, tm.setupTimeoutSrc = time.Nanosecond, "WithSetupTimeout(1ns)"
	_, err = tm.AllGather(context.Background(), []byte{1})
	require.ErrorIs(t, err, context.DeadlineExceeded)
	assert.True(t, strings.HasSuffix(err.Error(), "context deadline exceeded (setup deadline WithSetupTimeout(1ns))"), err.Error())
}

// TestRankFailureOutsideExchangeStopsOthers: a rank that stops outside an
// exchange (here: the driver panics in its cuMemCreate, which its worker
// turns into an error) closes its bootstrap, so the others stop at once
// rather than at the deadline; the error is that rank's, and nothing
// leaks.
func TestRankFailureOutsideExchangeStopsOthers(t *testing.T) {
	node := newNode(t, sim.Config{Devices: 3})
	drv := newHookDriver(node, "cuMemCreate", func(d cuda.Device) error {
		if d == 1 {
			panic("driver crashed")
		}
		return nil
	})
	start := time.Now()
	_, err := New(context.Background(), drv, devices(3), WithWorkspaceSize(smallData), WithSetupTimeout(30*time.Second), quiet())
	require.Error(t, err)
	assert.Less(t, time.Since(start), 5*time.Second, "the others waited for the deadline")
	assert.Contains(t, err.Error(), "job panicked: driver crashed")
	assert.NotErrorIs(t, err, ErrBootstrapClosed, "the echo was picked over the cause")
	require.NoError(t, node.CheckNoLeaks())
}
