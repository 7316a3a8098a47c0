package team

import (
	"bytes"
	"context"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/nvls-go/nvls/cuda"
	"github.com/nvls-go/nvls/cuda/sim"
)

// warnLogger is a logger of WARN lines and what it wrote.
func warnLogger() (*slog.Logger, *syncBuffer) {
	var b syncBuffer
	return slog.New(slog.NewTextHandler(&b, &slog.HandlerOptions{Level: slog.LevelWarn})), &b
}

// syncBuffer is a bytes.Buffer for the log lines of several workers.
type syncBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (s *syncBuffer) Write(p []byte) (int, error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.Write(p)
}

func (s *syncBuffer) String() string {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.b.String()
}

// successes counts the calls of op that reached the simulator and passed.
func successes(node *sim.Node, op string) int {
	n := 0
	for _, c := range node.CallsOf(op) {
		if c.Result == cuda.Success {
			n++
		}
	}
	return n
}

// The multicast calls of the bring-up where a transient error can come,
// the MC alias's cuMemMap included.
var retryEntries = append(append([]struct{ op, step string }{}, mcEntries...), struct{ op, step string }{"cuMemMap", stepMCMap})

// TestFabricRetryTransient: CUDA_ERROR_SYSTEM_NOT_READY twice at a
// multicast call of one rank (a Fabric Manager that stalls): every rank
// retries the step in lockstep, only the failing rank redoes its part,
// the team comes up multicast, and the retries are logged.
func TestFabricRetryTransient(t *testing.T) {
	for _, n := range []int{2, 4} {
		for _, e := range retryEntries {
			t.Run(fmt.Sprintf("%d/%s", n, e.op), func(t *testing.T) {
				// The calls of a bring-up without faults.
				clean := newNode(t, sim.Config{Devices: n})
				tm, err := New(testCtx(t), clean, devices(n), WithWorkspaceSize(smallData), quiet())
				require.NoError(t, err)
				require.NoError(t, tm.Close())
				want := successes(clean, e.op)

				rank := faultRank(e.op, n)
				node := newNode(t, sim.Config{Devices: n})
				drv, fired := failN(node, e.op, cuda.Device(rank), 2, cuda.ErrorSystemNotReady)
				l, logs := warnLogger()
				tm, err = New(testCtx(t), drv, devices(n), WithWorkspaceSize(smallData), WithLogger(l), WithFabricRetry(3, 10*time.Second))
				require.NoError(t, err)
				assert.Equal(t, 2, fired(), "the failing rank's part was not redone")
				assert.Equal(t, want, successes(node, e.op), "a rank whose part passed redid it")
				assert.Equal(t, Multicast, tm.Transport())
				assert.Nil(t, tm.Fallback())

				out := logs.String()
				assert.Equal(t, 2, strings.Count(out, "every rank retries it"), out)
				assert.Contains(t, out, fmt.Sprintf("step=%q rank=%d device=%d cause=\"%s: CUDA_ERROR_SYSTEM_NOT_READY (802)\"", e.step, rank, rank, e.op))
				assert.Contains(t, out, "retry=2 of=3")
				assert.Contains(t, out, e.step+": passed after retries\" retries=2")
				assert.NotContains(t, out, "falling back")
				require.NoError(t, tm.Close())
				require.NoError(t, node.CheckNoLeaks())
			})
		}
	}
}

// TestFabricRetryExhausted: a fabric that stays not ready is retried as
// many times as WithFabricRetry allows, or until its time is up; then
// the error stands: an auto team falls back (saying how often it
// retried), a forced one fails.
func TestFabricRetryExhausted(t *testing.T) {
	const n = 4
	t.Run("auto", func(t *testing.T) {
		node := newNode(t, sim.Config{Devices: n})
		drv, fired := failN(node, "cuMulticastBindMem", 2, 1000, cuda.ErrorSystemNotReady)
		l, logs := warnLogger()
		tm, err := New(testCtx(t), drv, devices(n), WithWorkspaceSize(smallData), WithLogger(l), WithFabricRetry(3, 10*time.Second))
		require.NoError(t, err)
		assert.Equal(t, 4, fired(), "one try and three retries")
		assert.Equal(t, Unicast, tm.Transport())
		fb := tm.Fallback()
		require.NotNil(t, fb)
		assert.Equal(t, 3, fb.Retries)
		assert.Equal(t, 2, fb.Rank)
		assert.Equal(t, "auto: multicast failed at bind multicast memory on rank 2 (cuMulticastBindMem: CUDA_ERROR_SYSTEM_NOT_READY (802)); fell back to unicast", tm.Reason())
		out := logs.String()
		assert.Equal(t, 3, strings.Count(out, "every rank retries it"), out)
		assert.Contains(t, out, "falling back to unicast")
		assert.Contains(t, out, "retries=3")
		require.NoError(t, tm.Close())
		require.NoError(t, node.CheckNoLeaks())
	})
	t.Run("forced", func(t *testing.T) {
		node := newNode(t, sim.Config{Devices: n})
		drv, fired := failN(node, "cuMulticastAddDevice", 1, 1000, cuda.ErrorSystemNotReady)
		_, err := New(testCtx(t), drv, devices(n), WithWorkspaceSize(smallData), WithTransport(Multicast), quiet(), WithFabricRetry(2, 10*time.Second))
		require.Error(t, err)
		assert.Equal(t, 3, fired())
		var fe *FabricError
		require.ErrorAs(t, err, &fe)
		assert.Equal(t, 2, fe.Retries)
		assert.ErrorIs(t, err, cuda.ErrSystemNotReady)
		assert.Contains(t, err.Error(), "(after 2 retries of the step by every rank)")
		t.Logf("what a user sees: %v", err)
		require.NoError(t, node.CheckNoLeaks())
	})
	t.Run("time", func(t *testing.T) {
		node := newNode(t, sim.Config{Devices: n})
		drv, fired := failN(node, "cuMulticastCreate", 0, 1000, cuda.ErrorSystemNotReady)
		start := time.Now()
		tm, err := New(testCtx(t), drv, devices(n), WithWorkspaceSize(smallData), quiet(), WithFabricRetry(100, 400*time.Millisecond))
		require.NoError(t, err)
		assert.Less(t, time.Since(start), 3*time.Second)
		fb := tm.Fallback()
		require.NotNil(t, fb)
		assert.Positive(t, fb.Retries)
		assert.Less(t, fb.Retries, 6, "the time bound did not stop the retries")
		assert.Equal(t, fb.Retries+1, fired())
		require.NoError(t, tm.Close())
		require.NoError(t, node.CheckNoLeaks())
	})
	t.Run("off", func(t *testing.T) {
		node := newNode(t, sim.Config{Devices: n})
		drv, fired := failN(node, "cuMulticastBindMem", 3, 1000, cuda.ErrorSystemNotReady)
		tm, err := New(testCtx(t), drv, devices(n), WithWorkspaceSize(smallData), quiet(), noRetry())
		require.NoError(t, err)
		assert.Equal(t, 1, fired())
		require.NotNil(t, tm.Fallback())
		assert.Zero(t, tm.Fallback().Retries)
		require.NoError(t, tm.Close())
		require.NoError(t, node.CheckNoLeaks())
	})
	t.Run("bad option", func(t *testing.T) {
		node := newNode(t, sim.Config{Devices: 2})
		_, err := New(testCtx(t), node, devices(2), WithFabricRetry(-1, time.Second))
		require.ErrorContains(t, err, "WithFabricRetry(-1, 1s)")
	})
}

// TestFabricRetryNotOverFallback: at the same step one rank's error is
// transient and another's is not: no retry, the team falls back at once.
func TestFabricRetryNotOverFallback(t *testing.T) {
	node := newNode(t, sim.Config{Devices: 4})
	var mu sync.Mutex
	calls := map[cuda.Device]int{}
	drv := newHookDriver(node, "cuMulticastAddDevice", func(d cuda.Device) error {
		mu.Lock()
		defer mu.Unlock()
		calls[d]++
		switch d {
		case 1:
			return cuda.NewError("cuMulticastAddDevice", cuda.ErrorSystemNotReady, "injected by the test")
		case 3:
			return cuda.NewError("cuMulticastAddDevice", cuda.ErrorIllegalState, "injected by the test")
		}
		return nil
	})
	l, logs := warnLogger()
	tm, err := New(testCtx(t), drv, devices(4), WithWorkspaceSize(smallData), WithLogger(l))
	require.NoError(t, err)
	assert.Equal(t, Unicast, tm.Transport())
	assert.Equal(t, 3, tm.Fallback().Rank)
	assert.Equal(t, cuda.ErrorIllegalState, tm.Fallback().Code)
	assert.Equal(t, map[cuda.Device]int{0: 1, 1: 1, 2: 1, 3: 1}, calls)
	assert.NotContains(t, logs.String(), "retries")
	require.NoError(t, tm.Close())
	require.NoError(t, node.CheckNoLeaks())
}

// TestFabricRetryAcrossProcesses: ranks brought up one by one, handles
// passed as FDs: a transient error at the import of the multicast object
// (which reads the FD rank 0 passed) and at a bind is retried with the
// same FD, and no FD leaks.
func TestFabricRetryAcrossProcesses(t *testing.T) {
	before := openFDs(t)
	for _, op := range []string{"cuMemImportFromShareableHandle", "cuMulticastBindMem"} {
		t.Run(op, func(t *testing.T) {
			node := newNode(t, sim.Config{Devices: 4})
			// The first imports are the multicast object's (step 5); the
			// workspaces' come at step 13.
			node.FailAt(op, 2, cuda.ErrorSystemNotReady)
			node.FailAt(op, 2, cuda.ErrorSystemNotReady)
			teams, err := newRanks(testCtx(t), node, 4, false, WithWorkspaceSize(smallData), quiet(), WithFabricRetry(3, 10*time.Second))
			require.NoError(t, err)
			assert.Equal(t, Multicast, teams.Transport())
			assert.Nil(t, teams.Fallback())
			injected := 0
			for _, c := range node.CallsOf(op) {
				if c.Injected {
					injected++
				}
			}
			assert.Equal(t, 2, injected)
			require.NoError(t, teams.Close())
			require.NoError(t, node.CheckNoLeaks())
		})
	}
	assert.LessOrEqual(t, openFDs(t), before, "FDs leaked")
}

// TestMulticastCliques: the devices report multicast support but are in
// two NVLink cliques; the driver refuses the add (or, with CliqueAtMap,
// the mapping of the object) with CUDA_ERROR_INVALID_DEVICE. Auto: every
// rank falls back to unicast with a WARN line that says why; forced: an
// error that says so. A team within one clique is multicast.
func TestMulticastCliques(t *testing.T) {
	cliques := [][]int{{0, 1}, {2, 3}}
	for _, atMap := range []bool{false, true} {
		op, step := "cuMulticastAddDevice", stepMCAdd
		if atMap {
			op, step = "cuMemMap", stepMCMap
		}
		t.Run(op, func(t *testing.T) {
			node := newNode(t, sim.Config{Devices: 4, Cliques: cliques, CliqueAtMap: atMap})
			l, logs := warnLogger()
			tm, err := New(testCtx(t), node, devices(4), WithWorkspaceSize(smallData), WithLogger(l))
			require.NoError(t, err)
			assert.Equal(t, Unicast, tm.Transport())
			fb := tm.Fallback()
			require.NotNil(t, fb)
			assert.Equal(t, step, fb.Step)
			assert.Equal(t, op, fb.Op)
			assert.Equal(t, cuda.ErrorInvalidDevice, fb.Code)
			assert.Zero(t, fb.Retries, "not transient: not retried")
			assert.Contains(t, fb.Likely, "NVLink clique")
			assert.Contains(t, tm.Reason(), fmt.Sprintf("%s: CUDA_ERROR_INVALID_DEVICE (101)); fell back to unicast", op))
			out := logs.String()
			assert.Equal(t, 1, strings.Count(out, "level=WARN"), out)
			assert.Contains(t, out, "falling back to unicast")
			assert.Contains(t, out, "not all in one NVLink clique")
			assert.Contains(t, out, "CliqueId")
			checkPeerWrites(t, node, tm)
			require.NoError(t, tm.Close())
			require.NoError(t, node.CheckNoLeaks())

			_, err = New(testCtx(t), node, devices(4), WithWorkspaceSize(smallData), WithTransport(Multicast), quiet())
			require.Error(t, err)
			assert.ErrorIs(t, err, cuda.ErrInvalidDevice)
			assert.ErrorIs(t, err, ErrFabricNotReady)
			assert.Contains(t, err.Error(), step+": multicast cannot span these devices: ")
			assert.Contains(t, err.Error(), "not all in one NVLink clique")
			t.Logf("what a user sees: %v", err)
			require.NoError(t, node.CheckNoLeaks())

			one, err := New(testCtx(t), node, []cuda.Device{2, 3}, WithWorkspaceSize(smallData), quiet())
			require.NoError(t, err)
			assert.Equal(t, Multicast, one.Transport())
			require.NoError(t, one.Close())
			require.NoError(t, node.CheckNoLeaks())
		})
	}
}

// TestMissingAddIsTheSetupTimeout: a rank's cuMulticastAddDevice never
// reaches the driver (here a wrapper swallows it), so the object never has
// all its devices. The driver's binds wait for the last add, and so do the
// simulator's: New ends at the setup timeout, naming the ranks held in
// the driver, with no invented error code and no fallback; once the
// simulator gives up waiting, everything is given back.
func TestMissingAddIsTheSetupTimeout(t *testing.T) {
	const timeout = 300 * time.Millisecond
	node := newNode(t, sim.Config{Devices: 4, MulticastWait: 2 * time.Second})
	drv := &skipAdd{hookDriver: newHookDriver(node, "", nil), dev: 1}
	start := time.Now()
	tm, err := New(testCtx(t), drv, devices(4), WithWorkspaceSize(smallData), WithSetupTimeout(timeout), quiet())
	require.Error(t, err)
	require.Nil(t, tm)
	assert.Less(t, time.Since(start), timeout+2*time.Second)
	assert.ErrorIs(t, err, ErrPeerMissing)
	assert.ErrorIs(t, err, context.DeadlineExceeded)
	// Every rank waits in its bind for the add that never came.
	assert.Contains(t, err.Error(), "rank(s) [0 1 2 3] (device(s) [0 1 2 3]) still inside a driver call")
	assert.NotErrorIs(t, err, ErrFabricNotReady)
	assert.NotErrorIs(t, err, cuda.ErrIllegalState)
	t.Logf("what a user sees: %v", err)
	for _, c := range node.CallsOf("cuMulticastBindMem") {
		assert.NotEqual(t, cuda.ErrorIllegalState, c.Result)
	}
	require.Eventually(t, func() bool { return node.CheckNoLeaks() == nil }, 15*time.Second, 10*time.Millisecond,
		"leaked once the simulator gave up waiting: %v", node.CheckNoLeaks())
}

// skipAdd swallows device dev's cuMulticastAddDevice: the call returns
// success without reaching the driver.
type skipAdd struct {
	*hookDriver
	dev cuda.Device
}

func (s *skipAdd) MulticastAddDevice(mc cuda.MemHandle, d cuda.Device) error {
	if d == s.dev {
		return nil
	}
	return s.hookDriver.MulticastAddDevice(mc, d)
}
