package team

import (
	"bytes"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/nvls-go/nvls/cuda"
	"github.com/nvls-go/nvls/cuda/sim"
	"github.com/nvls-go/nvls/internal/kabi"
)

// The driver codes that say "the fabric is not ready", and the multicast
// entry points of the bring-up with the step each belongs to.
var (
	fabricCodes = []cuda.Result{cuda.ErrorSystemNotReady, cuda.ErrorIllegalState, cuda.ErrorNotSupported, cuda.ErrorOutOfMemory}
	mcEntries   = []struct{ op, step string }{
		{"cuMulticastGetGranularity", stepMCGran},
		{"cuMulticastCreate", stepMCCreate},
		{"cuMulticastAddDevice", stepMCAdd},
		{"cuMulticastBindMem", stepMCBind},
	}
)

// faultRank is the rank a test fails op on: rank 0 for the create (only
// rank 0 creates), else one in the middle of 8 ranks or the last one.
func faultRank(op string, n int) int {
	switch {
	case op == "cuMulticastCreate":
		return 0
	case n == 8:
		return 5
	}
	return n - 1
}

// What a user is told for each code: a word of the likely cause.
var likelyWords = map[cuda.Result]string{
	cuda.ErrorSystemNotReady: "nvidia-fabricmanager",
	cuda.ErrorIllegalState:   "NVSwitch",
	cuda.ErrorNotSupported:   "Fabric Manager with NVLink SHARP",
	cuda.ErrorOutOfMemory:    "multicast objects (128",
}

// noRetry turns the lockstep retry of transient fabric errors off, for
// the tests of what the first fabric error does (fabric_retry_test.go
// tests the retry).
func noRetry() Option { return WithFabricRetry(0, 0) }

// TestFabricFallback: in auto mode, a fabric error at any multicast entry
// point on one rank makes every rank undo its multicast state and go on
// with unicast, says so in one WARN line and in Reason, and the team works.
func TestFabricFallback(t *testing.T) {
	for _, n := range []int{2, 4, 8} {
		for _, e := range mcEntries {
			for _, code := range fabricCodes {
				t.Run(fmt.Sprintf("%d/%s/%s", n, e.op, code), func(t *testing.T) {
					rank := faultRank(e.op, n)
					node := newNode(t, sim.Config{Devices: n})
					drv, fired := failOnce(node, e.op, cuda.Device(rank), code)
					var logs bytes.Buffer
					l := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn}))
					tm, err := New(testCtx(t), drv, devices(n), WithWorkspaceSize(smallData), WithLogger(l), noRetry())
					require.NoError(t, err)
					require.Equal(t, 1, fired())
					assert.Equal(t, Unicast, tm.Transport())
					want := fmt.Sprintf("auto: multicast failed at %s on rank %d (%s: %s (%d)); fell back to unicast", e.step, rank, e.op, code, int32(code))
					assert.Equal(t, want, tm.Reason())

					fb := tm.Fallback()
					require.NotNil(t, fb)
					assert.Equal(t, e.step, fb.Step)
					assert.Equal(t, rank, fb.Rank)
					assert.Equal(t, cuda.Device(rank), fb.Device)
					assert.Equal(t, e.op, fb.Op)
					assert.Equal(t, code, fb.Code)
					assert.ErrorIs(t, fb, ErrFabricNotReady)
					assert.ErrorIs(t, fb, &cuda.Error{Code: code}, "the driver's code still matches")
					var ce *cuda.Error
					require.ErrorAs(t, fb, &ce)
					assert.Equal(t, e.op, ce.Op)
					assert.Contains(t, fb.Likely, likelyWords[code])
					assert.Contains(t, fb.Remedy, "NVLS_TRANSPORT=unicast")

					// One WARN line, naming the cause.
					out := logs.String()
					assert.Equal(t, 1, strings.Count(out, "level=WARN"), out)
					assert.Contains(t, out, "falling back to unicast")
					assert.Contains(t, out, fmt.Sprintf("rank=%d", rank))
					assert.Contains(t, out, e.op)

					// No multicast state is left while the team lives, and
					// every rank works as a unicast team.
					live := node.Live()
					assert.Zero(t, live.MulticastObjects)
					assert.Zero(t, live.Binds)
					for l := 0; l < n; l++ {
						assert.Zero(t, tm.mcBaseOf(l))
					}
					assert.Zero(t, tm.Footprint().MulticastVA)
					assert.Equal(t, multicastRoundUp(kabi.SignalBytes+smallData, 2<<20), tm.layout().Size())
					checkPeerWrites(t, node, tm)
					require.NoError(t, tm.Close())
					require.NoError(t, node.CheckNoLeaks())
				})
			}
		}
	}
}

func multicastRoundUp(n, g uint64) uint64 { return (n + g - 1) / g * g }

// TestFabricErrorWhenForced: with multicast asked for, the same faults are
// New's error: a *FabricError naming the step, the rank and the device,
// saying what is likely wrong and what to do, and nothing leaks.
func TestFabricErrorWhenForced(t *testing.T) {
	const n = 4
	for _, e := range mcEntries {
		for _, code := range fabricCodes {
			t.Run(fmt.Sprintf("%s/%s", e.op, code), func(t *testing.T) {
				rank := faultRank(e.op, n)
				node := newNode(t, sim.Config{Devices: n})
				drv, fired := failOnce(node, e.op, cuda.Device(rank), code)
				_, err := New(testCtx(t), drv, devices(n), WithWorkspaceSize(smallData), WithTransport(Multicast), quiet(), noRetry())
				require.Error(t, err)
				require.Equal(t, 1, fired())
				var fe *FabricError
				require.ErrorAs(t, err, &fe)
				assert.Equal(t, rank, fe.Rank)
				assert.Equal(t, e.step, fe.Step)
				assert.ErrorIs(t, err, ErrFabricNotReady)
				assert.ErrorIs(t, err, &cuda.Error{Code: code})
				msg := err.Error()
				if e.op == "cuMulticastBindMem" {
					t.Logf("what a user sees: %s", msg)
				}
				prefix := fmt.Sprintf("team: rank %d (device %d): %s: multicast fabric not ready: ", rank, rank, e.step)
				assert.True(t, strings.HasPrefix(msg, prefix), "%q does not start with %q", msg, prefix)
				for _, s := range []string{e.op, code.String(), "Likely: ", likelyWords[code], "What to do: ", "NVLS_TRANSPORT=unicast"} {
					assert.Contains(t, msg, s)
				}
				require.NoError(t, node.CheckNoLeaks())
			})
		}
	}
}

// TestFabricFallbackNotForOtherErrors: a multicast entry point failing
// with a code that says nothing about the fabric fails the team, auto or
// not.
func TestFabricFallbackNotForOtherErrors(t *testing.T) {
	for _, code := range []cuda.Result{cuda.ErrorInvalidValue, cuda.ErrorUnknown, cuda.ErrorInvalidHandle} {
		node := newNode(t, sim.Config{Devices: 4})
		drv, fired := failOnce(node, "cuMulticastBindMem", 2, code)
		_, err := New(testCtx(t), drv, devices(4), WithWorkspaceSize(smallData), quiet())
		require.Error(t, err, "%v", code)
		require.Equal(t, 1, fired())
		assert.NotErrorIs(t, err, ErrFabricNotReady)
		assert.ErrorIs(t, err, &cuda.Error{Code: code})
		assert.Contains(t, err.Error(), "team: rank 2 (device 2): "+stepMCBind+": ")
		require.NoError(t, node.CheckNoLeaks())
	}
}

// TestFabricFallbackAcrossProcesses: the FD path (one rank per "process"):
// every rank imports, fails or not, and all agree on the same fallback.
func TestFabricFallbackAcrossProcesses(t *testing.T) {
	before := openFDs(t)
	for _, e := range mcEntries {
		for _, code := range []cuda.Result{cuda.ErrorSystemNotReady, cuda.ErrorOutOfMemory} {
			node := newNode(t, sim.Config{Devices: 4})
			rank := faultRank(e.op, 4)
			drv, fired := failOnce(node, e.op, cuda.Device(rank), code)
			teams, err := newRanks(testCtx(t), drv, 4, false, WithWorkspaceSize(smallData), quiet(), noRetry())
			require.NoError(t, err, "%s %v", e.op, code)
			require.Equal(t, 1, fired())
			assert.Equal(t, Unicast, teams.Transport(), "every rank on unicast")
			assert.Equal(t, fmt.Sprintf("auto: multicast failed at %s on rank %d (%s: %s (%d)); fell back to unicast", e.step, rank, e.op, code, int32(code)), teams.Reason())
			fb := teams.Fallback()
			require.NotNil(t, fb)
			assert.Equal(t, rank, fb.Rank)
			assert.ErrorIs(t, fb, &cuda.Error{Code: code})
			assert.Zero(t, node.Live().MulticastObjects)
			checkPeerWrites(t, node, teams...)
			require.NoError(t, teams.Close())
			require.NoError(t, node.CheckNoLeaks())
		}
	}
	assert.LessOrEqual(t, openFDs(t), before, "FDs leaked")
}

// TestFabricFallbackSlotsExhausted: the sim's multicast slots run out
// (cuMulticastCreate: OUT_OF_MEMORY); an auto team falls back, a forced
// one fails saying the slots are likely exhausted; once a slot is free
// again, multicast is back.
func TestFabricFallbackSlotsExhausted(t *testing.T) {
	node := newNode(t, sim.Config{Devices: 2, MaxMulticastObjects: 1})
	first, err := New(testCtx(t), node, devices(2), WithWorkspaceSize(smallData), quiet())
	require.NoError(t, err)
	require.Equal(t, Multicast, first.Transport())

	l, logs := warnLogger()
	second, err := New(testCtx(t), node, devices(2), WithWorkspaceSize(smallData), WithLogger(l))
	require.NoError(t, err)
	assert.Equal(t, Unicast, second.Transport())
	assert.Equal(t, "auto: multicast failed at create multicast object on rank 0 (cuMulticastCreate: CUDA_ERROR_OUT_OF_MEMORY (2)); fell back to unicast", second.Reason())
	assert.Contains(t, second.Fallback().Likely, "multicast resources are exhausted")
	// One WARN line says so; the slots do not come back by waiting: no
	// retry.
	out := logs.String()
	assert.Equal(t, 1, strings.Count(out, "level=WARN"), out)
	assert.Contains(t, out, "multicast resources are exhausted")
	assert.Contains(t, out, "128 on HGX H100/H200")
	assert.Zero(t, second.Fallback().Retries)
	assert.Len(t, node.CallsOf("cuMulticastCreate"), 2)

	_, err = New(testCtx(t), node, devices(2), WithWorkspaceSize(smallData), WithTransport(Multicast), quiet())
	require.ErrorIs(t, err, ErrFabricNotReady)
	require.ErrorIs(t, err, cuda.ErrOutOfMemory)
	t.Logf("what a user sees: %v", err)

	require.NoError(t, first.Close())
	third, err := New(testCtx(t), node, devices(2), WithWorkspaceSize(smallData), quiet())
	require.NoError(t, err)
	assert.Equal(t, Multicast, third.Transport())
	assert.Nil(t, third.Fallback())
	require.NoError(t, third.Close())
	require.NoError(t, second.Close())
	require.NoError(t, node.CheckNoLeaks())
}

// TestFaultDuringFallback: the fallback's own driver calls (the unbinds,
// unmaps and releases that undo multicast) fail in turn; each failure is
// an error naming the step, and nothing leaks.
func TestFaultDuringFallback(t *testing.T) {
	for _, n := range []int{2, 4} {
		t.Run(fmt.Sprint(n), func(t *testing.T) {
			run := func(nth int) (*sim.Node, *Team, error) {
				node := sim.New(sim.Config{Devices: n})
				drv, _ := failOnce(node, "cuMulticastBindMem", cuda.Device(n-1), cuda.ErrorSystemNotReady)
				if nth > 0 {
					node.FailNth(nth, cuda.ErrorUnknown)
				}
				tm, err := New(testCtx(t), drv, devices(n), WithWorkspaceSize(smallData), quiet(), noRetry())
				return node, tm, err
			}
			node, tm, err := run(0)
			require.NoError(t, err)
			require.NotNil(t, tm.Fallback())
			total := node.CallCount()
			require.NoError(t, tm.Close())
			require.NoError(t, node.CheckNoLeaks())
			_ = node.Close()
			unwindFaults := 0
			for nth := 1; nth <= total; nth++ {
				node, tm, err := run(nth)
				var injected sim.Call
				for _, c := range node.Calls() {
					if c.Injected {
						injected = c
					}
				}
				require.NotEmpty(t, injected.Op, "call %d: no fault fired", nth)
				if !assert.Error(t, err, "call %d (%v) did not fail the setup", nth, injected) {
					_ = tm.Close()
				} else {
					assert.True(t, namesStep(err.Error()), "call %d (%v): %v", nth, injected, err)
					assert.ErrorIs(t, err, &cuda.Error{Code: cuda.ErrorUnknown}, "call %d (%v)", nth, injected)
					if strings.Contains(err.Error(), stepMCUnwind) {
						unwindFaults++
					}
				}
				assert.NoError(t, node.CheckNoLeaks(), "call %d (%v) leaked; error was %v", nth, injected, err)
				_ = node.Close()
			}
			assert.Positive(t, unwindFaults, "no fault hit the fallback's unwinding")
			t.Logf("%d calls failed in turn, %d of them while undoing multicast", total, unwindFaults)
		})
	}
}

// TestDiagnoseOnlyMulticastSteps: a fabric code from a call outside the
// multicast part (here cuMemCreate of the workspace) is an ordinary
// error, not a fallback.
func TestDiagnoseOnlyMulticastSteps(t *testing.T) {
	node := newNode(t, sim.Config{Devices: 2})
	drv, fired := failOnce(node, "cuMemCreate", 1, cuda.ErrorSystemNotReady)
	_, err := New(testCtx(t), drv, devices(2), WithWorkspaceSize(smallData), quiet())
	require.Error(t, err)
	require.Equal(t, 1, fired())
	assert.NotErrorIs(t, err, ErrFabricNotReady)
	assert.ErrorIs(t, err, cuda.ErrSystemNotReady)
	assert.Contains(t, err.Error(), stepMemCreate)
	require.NoError(t, node.CheckNoLeaks())
	var pe *PeerError
	assert.False(t, errors.As(err, &pe), "the root cause, not a peer's echo: %v", err)
}

// TestFabricFallbackEveryRankFails: every rank's add fails; the team falls
// back once, naming the lowest rank, and the WARN line lists them all.
func TestFabricFallbackEveryRankFails(t *testing.T) {
	node := newNode(t, sim.Config{Devices: 4})
	for i := 0; i < 4; i++ {
		node.FailAt("cuMulticastAddDevice", 1, cuda.ErrorIllegalState)
	}
	var logs bytes.Buffer
	tm, err := New(testCtx(t), node, devices(4), WithWorkspaceSize(smallData),
		WithLogger(slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelWarn}))))
	require.NoError(t, err)
	assert.Equal(t, Unicast, tm.Transport())
	assert.Equal(t, 0, tm.Fallback().Rank)
	assert.Equal(t, "auto: multicast failed at add device to multicast object on rank 0 (cuMulticastAddDevice: CUDA_ERROR_ILLEGAL_STATE (401)); fell back to unicast", tm.Reason())
	assert.Contains(t, logs.String(), "failed_ranks=\"[0 1 2 3]\"")
	assert.Zero(t, node.Live().MulticastObjects)
	require.NoError(t, tm.Close())
	require.NoError(t, node.CheckNoLeaks())
}

// TestFabricErrorWithAnotherRanksFatalError: at the same step one rank
// meets a fabric error and another an ordinary one: the team fails (no
// fallback, no retry), with the ordinary error as the cause.
func TestFabricErrorWithAnotherRanksFatalError(t *testing.T) {
	node := newNode(t, sim.Config{Devices: 4})
	drv := newHookDriver(node, "cuMulticastAddDevice", func(d cuda.Device) error {
		switch d {
		case 1:
			return cuda.NewError("cuMulticastAddDevice", cuda.ErrorSystemNotReady, "injected by the test")
		case 2:
			return cuda.NewError("cuMulticastAddDevice", cuda.ErrorInvalidValue, "injected by the test")
		}
		return nil
	})
	_, err := New(testCtx(t), drv, devices(4), WithWorkspaceSize(smallData), quiet())
	require.Error(t, err)
	assert.ErrorIs(t, err, cuda.ErrInvalidValue)
	assert.NotErrorIs(t, err, ErrFabricNotReady)
	assert.True(t, strings.HasPrefix(err.Error(), "team: rank 2 (device 2): "+stepMCAdd+": "), err.Error())
	require.NoError(t, node.CheckNoLeaks())
}
