package team

import (
	"bytes"
	"context"
	"crypto/rand"
	"errors"
	"fmt"
	"log/slog"
	"strings"
	"sync"
	"testing"
	"time"
	"unsafe"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/nvls-go/nvls/cuda"
	"github.com/nvls-go/nvls/cuda/sim"
	"github.com/nvls-go/nvls/internal/kabi"
)

// smallData keeps sim workspaces small: one 2 MiB granule with the signal
// area.
const smallData = 1 << 20

func devices(n int) []cuda.Device {
	out := make([]cuda.Device, n)
	for i := range out {
		out[i] = cuda.Device(i)
	}
	return out
}

func newNode(t testing.TB, cfg sim.Config) *sim.Node {
	t.Helper()
	cfg.Kernels = map[string]sim.KernelFunc{probeKernel: runProbe}
	n := sim.New(cfg)
	t.Cleanup(func() { _ = n.Close() })
	return n
}

func testCtx(t testing.TB) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

// index of the first call of op with arg (0 = any) at or after from, -1 if none.
func indexOf(calls []sim.Call, from int, op string, arg uint64) int {
	for i := from; i < len(calls); i++ {
		if calls[i].Op == op && (arg == 0 || calls[i].Arg == arg) {
			return i
		}
	}
	return -1
}

func lastIndexOf(calls []sim.Call, op string, arg uint64) int {
	for i := len(calls) - 1; i >= 0; i-- {
		if calls[i].Op == op && (arg == 0 || calls[i].Arg == arg) {
			return i
		}
	}
	return -1
}

func TestMulticastTeamCallSequence(t *testing.T) {
	node := newNode(t, sim.Config{Devices: 4})
	tm, err := New(testCtx(t), node, devices(4), WithWorkspaceSize(smallData))
	require.NoError(t, err)
	require.Equal(t, Multicast, tm.Transport())
	calls := node.Calls()

	creates := node.CallsOf("cuMulticastCreate")
	require.Len(t, creates, 1, "one multicast object per team")
	// The allocation granularity is asked once per rank (queryDevice);
	// the multicast step and the workspace's cuMemCreate use that answer.
	assert.Len(t, node.CallsOf("cuMemGetAllocationGranularity"), 4, "allocation granularity queries")
	adds := node.CallsOf("cuMulticastAddDevice")
	require.Len(t, adds, 4)
	mc := adds[0].Arg
	addDevs := map[int]bool{}
	for _, a := range adds {
		assert.Equal(t, mc, a.Arg)
		addDevs[a.Device] = true
	}
	assert.Len(t, addDevs, 4, "each device added once")
	binds := node.CallsOf("cuMulticastBindMem")
	require.Len(t, binds, 4)
	firstBind := indexOf(calls, 0, "cuMulticastBindMem", mc)
	lastAdd := lastIndexOf(calls, "cuMulticastAddDevice", mc)
	assert.Less(t, indexOf(calls, 0, "cuMulticastCreate", 0), indexOf(calls, 0, "cuMulticastAddDevice", 0))
	assert.Less(t, lastAdd, firstBind, "every device added before the first bind")
	lastBind := lastIndexOf(calls, "cuMulticastBindMem", mc)
	firstMCMap := indexOf(calls, 0, "cuMemMap", mc)
	require.GreaterOrEqual(t, firstMCMap, 0)
	assert.Less(t, lastBind, firstMCMap, "the MC alias is mapped after every bind")
	mcMaps := 0
	for _, c := range calls {
		if c.Op == "cuMemMap" && c.Arg == mc {
			mcMaps++
		}
	}
	assert.Equal(t, 4, mcMaps, "one MC alias per device")
	for l := 0; l < 4; l++ {
		assert.NotZero(t, tm.mcBaseOf(l))
	}

	var mcBases []uint64
	for l := 0; l < 4; l++ {
		mcBases = append(mcBases, uint64(tm.mcBaseOf(l)))
		require.NotZero(t, mcBases[l], "rank %d's MC alias", l)
	}
	node.ResetCalls()
	assert.False(t, tm.Closed())
	require.NoError(t, tm.Close())
	assert.True(t, tm.Closed())
	require.NoError(t, tm.Close(), "second Close")
	calls = node.Calls()
	// Reverse: MC unmaps, then unbinds, then the MC release, then the
	// workspace memory released.
	lastMCUnmap := -1
	var unmappedFirst []uint64
	for i, c := range calls {
		if c.Op == "cuMemUnmap" && i < indexOf(calls, 0, "cuMulticastUnbind", 0) {
			lastMCUnmap = i
			unmappedFirst = append(unmappedFirst, c.Addr)
		}
	}
	require.GreaterOrEqual(t, lastMCUnmap, 0, "MC aliases unmapped before the unbinds")
	for l, b := range mcBases {
		assert.Contains(t, unmappedFirst, b, "rank %d's MC alias unmapped before the unbinds", l)
	}
	unbinds := node.CallsOf("cuMulticastUnbind")
	require.Len(t, unbinds, 4)
	release := indexOf(calls, 0, "cuMemRelease", mc)
	require.GreaterOrEqual(t, release, 0)
	lastUnbind := lastIndexOf(calls, "cuMulticastUnbind", mc)
	assert.Less(t, lastUnbind, release, "unbind before the MC release")
	// The workspace memory, made after the MC object, goes after the
	// unbinds and before the MC object: the bring-up run backwards.
	for i, c := range calls {
		if c.Op == "cuMemRelease" && c.Arg != mc {
			assert.Greater(t, i, lastUnbind, "workspace memory released after the unbinds")
			assert.Less(t, i, release, "workspace memory released before the MC object")
		}
		if c.Op == "cuMemMap" || c.Op == "cuMulticastBindMem" || c.Op == "cuMulticastAddDevice" {
			t.Errorf("Close made a setup call: %v", c)
		}
	}
	require.NoError(t, node.CheckNoLeaks())
}

// setupSteps: the steps an error of New may name.
var setupSteps = []string{stepStart, stepWorkerStart, stepQuery, stepPeers, stepMCGran, stepMCCreate, stepMCShare, stepMCAdd,
	stepMemCreate, stepMCBind, stepMCMap, stepMCUnwind, stepMapOwn, stepZero, stepShareMem, stepImportMem, stepMapPeers}

// mcSteps: the steps of the multicast part of the setup.
var mcSteps = []string{stepMCGran, stepMCCreate, stepMCShare, stepMCAdd, stepMCBind, stepMCMap}

func namesStep(msg string) bool {
	for _, s := range setupSteps {
		if strings.Contains(msg, ": "+s+": ") {
			return true
		}
	}
	return false
}

// countSetupCalls returns how many driver calls a successful New makes.
func countSetupCalls(t *testing.T, cfg sim.Config, newTeam func(*sim.Node) (closer, error)) int {
	node := newNode(t, cfg)
	tm, err := newTeam(node)
	require.NoError(t, err)
	n := node.CallCount()
	require.NoError(t, tm.Close())
	require.NoError(t, node.CheckNoLeaks())
	return n
}

// closer is a team as the fault tests see it: one Team, or the NewRank
// teams of every rank.
type closer interface {
	Close() error
	Transport() Transport
	Reason() string
	Fallback() *FabricError
}

// faultEveryCall fails each driver call of the setup in turn with code.
// Each failure must fail the setup with an error naming the step, the rank
// and the call and wrapping the driver's error; except, when the
// transport is chosen automatically (auto), a failure the multicast part
// of the setup diagnoses as "fabric not ready", after which every rank
// must have fallen back to unicast because of exactly that call. A fault
// at a cuMulticast* entry point in auto mode must always fall back.
// Nothing may leak either way.
func faultEveryCall(t *testing.T, cfg sim.Config, code cuda.Result, auto bool, newTeam func(*sim.Node) (closer, error)) {
	total := countSetupCalls(t, cfg, newTeam)
	require.Greater(t, total, 30)
	fallbacks, retried := 0, 0
	for nth := 1; nth <= total; nth++ {
		node := sim.New(cfg)
		node.FailNth(nth, code)
		tm, err := newTeam(node)
		var injected *struct {
			sim.Call
			idx int
		}
		for i, c := range node.Calls() {
			if c.Injected {
				injected = &struct {
					sim.Call
					idx int
				}{c, i}
			}
		}
		require.NotNil(t, injected, "call %d: no fault fired", nth)
		mcEntry := strings.HasPrefix(injected.Op, "cuMulticast")
		if err == nil && tm.Fallback() == nil && code == cuda.ErrorSystemNotReady && tm.Transport() == Multicast {
			// Retried in lockstep (WithFabricRetry): the call was made
			// again on its device, and passed.
			retried++
			again := false
			for _, c := range node.Calls()[injected.idx+1:] {
				// (An injected fault leaves the device of a call that
				// learns it from its handle unknown, -1.)
				same := c.Op == injected.Op && c.Arg == injected.Arg && c.Size == injected.Size &&
					(injected.Device < 0 || c.Device == injected.Device)
				again = again || (same && c.Result == cuda.Success)
			}
			assert.True(t, again, "call %d (%v): no fallback, no error, and no retry", nth, injected)
			require.NoError(t, tm.Close(), "call %d", nth)
		} else if err == nil {
			fallbacks++
			fb := tm.Fallback()
			ok := assert.True(t, auto, "call %d (%v): a forced transport hid the fault", nth, injected) &&
				assert.NotNil(t, fb, "call %d (%v): the fault was swallowed without a fallback", nth, injected)
			if ok {
				assert.Equal(t, Unicast, tm.Transport(), "call %d", nth)
				assert.Equal(t, injected.Op, fb.Op, "call %d: the fallback names another call", nth)
				assert.Equal(t, code, fb.Code, "call %d", nth)
				assert.Contains(t, mcSteps, fb.Step, "call %d: a fallback outside the multicast steps", nth)
				assert.True(t, mcEntry || code == cuda.ErrorSystemNotReady || code == cuda.ErrorIllegalState,
					"call %d (%v): %v is no fabric error there", nth, injected, code)
				assert.Equal(t, fmt.Sprintf("auto: multicast failed at %s on rank %d (%s: %s (%d)); fell back to unicast",
					fb.Step, fb.Rank, injected.Op, code, int32(code)), tm.Reason(), "call %d", nth)
			}
			require.NoError(t, tm.Close(), "call %d", nth)
		} else {
			assert.False(t, auto && mcEntry, "call %d (%v): auto mode did not fall back: %v", nth, injected, err)
			msg := err.Error()
			assert.True(t, errors.Is(err, &cuda.Error{Code: code}), "call %d (%v): error does not wrap the driver's: %v", nth, injected, err)
			assert.True(t, namesStep(msg), "call %d (%v): error names no step: %v", nth, injected, err)
			assert.Contains(t, msg, injected.Op, "call %d: error does not name the failed call", nth)
			assert.Regexp(t, `team: (rank \d+ \(device \d+\)|start)`, msg, "call %d: error names no rank", nth)
		}
		assert.NoError(t, node.CheckNoLeaks(), "call %d (%v) leaked; error was %v", nth, injected, err)
		_ = node.Close()
	}
	t.Logf("failed each of the %d driver calls of the setup with %v in turn: %d fell back to unicast, %d were retried", total, code, fallbacks, retried)
	if auto && cfg.Devices > 1 {
		assert.Positive(t, fallbacks+retried, "no fault fell back or was retried")
	}
}

func newInProcess(t *testing.T, n int, opts ...Option) func(*sim.Node) (closer, error) {
	return func(node *sim.Node) (closer, error) {
		tm, err := New(testCtx(t), node, devices(n), append([]Option{WithWorkspaceSize(smallData), quiet()}, opts...)...)
		if err != nil {
			return nil, err
		}
		return tm, nil
	}
}

// quiet drops the log lines (the fallback's WARN lines, in fault loops).
func quiet() Option { return WithLogger(slog.New(slog.DiscardHandler)) }

func TestFaultAtEverySetupCall(t *testing.T) {
	for _, n := range []int{2, 4} {
		for _, tc := range []struct {
			name string
			code cuda.Result
			opts []Option
		}{
			{"auto/out-of-memory", cuda.ErrorOutOfMemory, nil},
			{"auto/illegal-state", cuda.ErrorIllegalState, nil},
			{"multicast/system-not-ready", cuda.ErrorSystemNotReady, []Option{WithTransport(Multicast), noRetry()}},
			{"auto/system-not-ready/retried", cuda.ErrorSystemNotReady, []Option{WithFabricRetry(2, 5*time.Second)}},
			{"unicast/out-of-memory", cuda.ErrorOutOfMemory, []Option{WithTransport(Unicast)}},
		} {
			t.Run(fmt.Sprintf("%d/%s", n, tc.name), func(t *testing.T) {
				faultEveryCall(t, sim.Config{Devices: n}, tc.code, strings.HasPrefix(tc.name, "auto/"), newInProcess(t, n, tc.opts...))
			})
		}
	}
}

// procBoot makes an in-process bootstrap look like one of separate
// processes, so that NewRank takes the export / FD / import path.
type procBoot struct{ Bootstrap }

func (procBoot) InProcess() bool { return false }

// ranksTeam is the NewRank teams of all ranks, brought up on goroutines.
type ranksTeam []*Team

// Transport is the ranks' transport, or Transport(-1) when they differ.
func (rt ranksTeam) Transport() Transport {
	for _, t := range rt[1:] {
		if t.Transport() != rt[0].Transport() {
			return Transport(-1)
		}
	}
	return rt[0].Transport()
}

// Reason is the ranks' reason, or a note that they differ.
func (rt ranksTeam) Reason() string {
	for _, t := range rt[1:] {
		if t.Reason() != rt[0].Reason() {
			return "the ranks disagree"
		}
	}
	return rt[0].Reason()
}

// Fallback is rank 0's (every rank's must be the same).
func (rt ranksTeam) Fallback() *FabricError {
	for _, t := range rt[1:] {
		if (t.Fallback() == nil) != (rt[0].Fallback() == nil) || (t.Fallback() != nil && t.Fallback().Error() != rt[0].Fallback().Error()) {
			return &FabricError{Step: "the ranks disagree"}
		}
	}
	return rt[0].Fallback()
}

func (rt ranksTeam) Close() error {
	var errs []error
	for _, t := range rt {
		if t != nil {
			errs = append(errs, t.Close())
		}
	}
	return errors.Join(errs...)
}

func newRanks(ctx context.Context, d cuda.Driver, n int, inProcess bool, opts ...Option) (ranksTeam, error) {
	boots := NewInProcess(n)
	teams := make(ranksTeam, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r := 0; r < n; r++ {
		var b Bootstrap = boots[r]
		if !inProcess {
			b = procBoot{b}
		}
		wg.Add(1)
		go func() {
			defer wg.Done()
			teams[r], errs[r] = NewRank(ctx, d, cuda.Device(r), b, opts...)
		}()
	}
	wg.Wait()
	for _, b := range boots {
		_ = b.Close()
	}
	if err := rootCause(errs); err != nil {
		_ = teams.Close()
		return nil, err
	}
	return teams, nil
}

func TestNewRankAcrossProcesses(t *testing.T) {
	before := openFDs(t)
	node := newNode(t, sim.Config{Devices: 4})
	teams, err := newRanks(testCtx(t), node, 4, false, WithWorkspaceSize(smallData))
	require.NoError(t, err)
	assert.Equal(t, Multicast, teams[0].Transport())
	assert.Len(t, node.CallsOf("cuMulticastCreate"), 1)
	// The object exported once, imported by the 3 others; every workspace
	// exported once and imported by the 3 others.
	assert.Len(t, node.CallsOf("cuMemExportToShareableHandle"), 1+4)
	assert.Len(t, node.CallsOf("cuMemImportFromShareableHandle"), 3+4*3)
	for r, tm := range teams {
		assert.Equal(t, 1, tm.NumLocal())
		assert.Equal(t, r, tm.Rank(0))
		assert.Equal(t, 4, tm.Size())
	}
	checkPeerWrites(t, node, teams...)
	require.NoError(t, teams.Close())
	require.NoError(t, node.CheckNoLeaks())
	assert.LessOrEqual(t, openFDs(t), before, "FDs leaked")
}

func TestFaultAtEverySetupCallAcrossProcesses(t *testing.T) {
	before := openFDs(t)
	faultEveryCall(t, sim.Config{Devices: 3}, cuda.ErrorOutOfMemory, true, func(n *sim.Node) (closer, error) {
		rt, err := newRanks(testCtx(t), n, 3, false, WithWorkspaceSize(smallData), quiet())
		if err != nil {
			return nil, err
		}
		return rt, nil
	})
	assert.LessOrEqual(t, openFDs(t), before, "FDs leaked")
}

func TestNewRankMissingRankTimesOut(t *testing.T) {
	node := newNode(t, sim.Config{Devices: 3})
	boots := NewInProcess(3)
	ctx, cancel := context.WithTimeout(context.Background(), 300*time.Millisecond)
	defer cancel()
	errs := make([]error, 2)
	var wg sync.WaitGroup
	for r := 0; r < 2; r++ { // rank 2 never comes
		wg.Add(1)
		go func() {
			defer wg.Done()
			tm, err := NewRank(ctx, node, cuda.Device(r), boots[r], WithWorkspaceSize(smallData))
			if tm != nil {
				_ = tm.Close()
			}
			errs[r] = err
		}()
	}
	wg.Wait()
	for r, err := range errs {
		require.Error(t, err, "rank %d", r)
		var mr *MissingRanksError
		require.ErrorAs(t, err, &mr, "rank %d: %v", r, err)
		assert.Equal(t, []int{2}, mr.Missing)
		assert.ErrorIs(t, err, context.DeadlineExceeded)
	}
	require.NoError(t, node.CheckNoLeaks())
}

// checkPeerWrites: every local rank of every team writes a distinct random
// pattern into every rank's workspace through its own mapping of it; every
// rank then reads its own workspace through its UC alias and finds each
// writer's pattern.
func checkPeerWrites(t *testing.T, node *sim.Node, teams ...*Team) {
	const chunk = 4096
	type key struct{ writer, target int }
	want := map[key][]byte{}
	var size int
	for _, tm := range teams {
		size = tm.Size()
		for l := 0; l < tm.NumLocal(); l++ {
			for q := 0; q < size; q++ {
				b := make([]byte, chunk)
				_, _ = rand.Read(b)
				want[key{tm.Rank(l), q}] = b
			}
		}
	}
	for _, tm := range teams {
		err := tm.Run(JobFunc(func(l int) error {
			bases := tm.ucBases(l)
			me := tm.Rank(l)
			for q := 0; q < size; q++ {
				dst := bases[q] + kabi.SignalBytes + cuda.DevicePtr(me*chunk)
				if err := cuda.CopyHtoD(tm.Driver(), dst, want[key{me, q}]); err != nil {
					return fmt.Errorf("rank %d writes rank %d: %w", me, q, err)
				}
			}
			return nil
		}))
		require.NoError(t, err)
	}
	for _, tm := range teams {
		err := tm.Run(JobFunc(func(l int) error {
			me := tm.Rank(l)
			got := make([]byte, chunk*size)
			if err := cuda.CopyDtoH(tm.Driver(), got, tm.ucBases(l)[me]+kabi.SignalBytes); err != nil {
				return err
			}
			for w := 0; w < size; w++ {
				if !bytes.Equal(want[key{w, me}], got[w*chunk:(w+1)*chunk]) {
					return fmt.Errorf("rank %d: rank %d's write is not there", me, w)
				}
			}
			return nil
		}))
		require.NoError(t, err)
	}
}

func TestUnicastPeerMappingsReachEveryPeer(t *testing.T) {
	node := newNode(t, sim.Config{Devices: 4})
	tm, err := New(testCtx(t), node, devices(4), WithWorkspaceSize(smallData), WithTransport(Unicast))
	require.NoError(t, err)
	assert.Equal(t, Unicast, tm.Transport())
	for l := 0; l < 4; l++ {
		assert.Zero(t, tm.mcBaseOf(l))
		bases := tm.ucBases(l)
		for q := 0; q < kabi.MaxRanks; q++ {
			if q < 4 {
				assert.NotZero(t, bases[q])
			} else {
				assert.Zero(t, bases[q])
			}
		}
	}
	checkPeerWrites(t, node, tm)
	// The signal areas were zeroed.
	for l := 0; l < 4; l++ {
		require.NoError(t, tm.Run(JobFunc(func(ll int) error {
			if ll != l {
				return nil
			}
			sig := make([]byte, kabi.SignalBytes)
			sig[7] = 1
			if err := cuda.CopyDtoH(tm.Driver(), sig, tm.ucBases(l)[l]); err != nil {
				return err
			}
			if !bytes.Equal(sig, make([]byte, kabi.SignalBytes)) {
				return fmt.Errorf("rank %d: signal area not zeroed", l)
			}
			return nil
		})))
	}
	require.NoError(t, tm.Close())
	require.NoError(t, node.CheckNoLeaks())
}

func TestOffSwitch(t *testing.T) {
	type tc struct {
		name     string
		cfg      sim.Config
		env      map[string]string
		opts     []Option
		want     Transport
		reason   string // in Reason()
		errIs    error
		errText  []string
		noMCCall bool // no cuMulticast* entry point may be called
	}
	cases := []tc{
		{name: "auto, all support", want: Multicast, reason: "auto: all 4 devices support multicast"},
		{name: "option unicast", opts: []Option{WithTransport(Unicast)}, want: Unicast, reason: "WithTransport(unicast)", noMCCall: true},
		{name: "env unicast", env: map[string]string{"NVLS_TRANSPORT": "unicast"}, want: Unicast, reason: "NVLS_TRANSPORT=unicast", noMCCall: true},
		{name: "option beats env", env: map[string]string{"NVLS_TRANSPORT": "unicast"}, opts: []Option{WithTransport(Multicast)}, want: Multicast, reason: "WithTransport(multicast)"},
		{name: "option unicast beats env multicast", env: map[string]string{"NVLS_TRANSPORT": "multicast"}, opts: []Option{WithTransport(Unicast)}, want: Unicast, noMCCall: true},
		{name: "env multicast", env: map[string]string{"NVLS_TRANSPORT": "multicast"}, want: Multicast, reason: "NVLS_TRANSPORT=multicast"},
		{name: "NCCL_NVLS_ENABLE=0", env: map[string]string{"NCCL_NVLS_ENABLE": "0"}, want: Unicast, reason: "NCCL_NVLS_ENABLE=0", noMCCall: true},
		{name: "NCCL_NVLS_ENABLE=0 beats option", env: map[string]string{"NCCL_NVLS_ENABLE": "0"}, opts: []Option{WithTransport(Multicast)},
			errIs: cuda.ErrMulticastDisabled, errText: []string{"WithTransport(multicast)", "NCCL_NVLS_ENABLE=0", "safety switch"}, noMCCall: true},
		{name: "NCCL_NVLS_ENABLE=0 beats env", env: map[string]string{"NCCL_NVLS_ENABLE": "0", "NVLS_TRANSPORT": "multicast"},
			errIs: cuda.ErrMulticastDisabled, errText: []string{"NVLS_TRANSPORT=multicast", "NCCL_NVLS_ENABLE=0"}, noMCCall: true},
		{name: "NCCL_NVLS_ENABLE=1 is on", env: map[string]string{"NCCL_NVLS_ENABLE": "1"}, want: Multicast},
		{name: "unsupported device, auto", cfg: sim.Config{NoMulticast: []int{2}}, want: Unicast, reason: "device 2", noMCCall: true},
		{name: "unsupported device, asked", cfg: sim.Config{NoMulticast: []int{2}}, opts: []Option{WithTransport(Multicast)},
			errIs: ErrMulticastUnsupported, errText: []string{"rank 2 (device 2", "MULTICAST_SUPPORTED is 0"}, noMCCall: true},
		{name: "old driver, auto", cfg: sim.Config{DriverVersion: 12000}, want: Unicast, reason: "12000", noMCCall: true},
		{name: "old driver, env asks", cfg: sim.Config{DriverVersion: 12000}, env: map[string]string{"NVLS_TRANSPORT": "multicast"},
			errIs: ErrMulticastUnsupported, errText: []string{"12000"}, noMCCall: true},
		{name: "bad NVLS_TRANSPORT", env: map[string]string{"NVLS_TRANSPORT": "sharp"}, errIs: ErrBadEnv,
			errText: []string{"NVLS_TRANSPORT", "auto, multicast, unicast"}, noMCCall: true},
		{name: "bad NVLS_DEBUG", env: map[string]string{"NVLS_DEBUG": "LOUD"}, errIs: ErrBadEnv,
			errText: []string{"NVLS_DEBUG", "WARN, INFO, TRACE"}, noMCCall: true},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			for k, v := range c.env {
				t.Setenv(k, v)
			}
			cfg := c.cfg
			cfg.Devices = 4
			node := newNode(t, cfg)
			var logs bytes.Buffer
			opts := append([]Option{WithWorkspaceSize(smallData), WithLogger(slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: slog.LevelInfo})))}, c.opts...)
			tm, err := New(testCtx(t), node, devices(4), opts...)
			if c.errIs != nil {
				require.Error(t, err)
				assert.ErrorIs(t, err, c.errIs)
				for _, s := range c.errText {
					assert.Contains(t, err.Error(), s)
				}
			} else {
				require.NoError(t, err)
				assert.Equal(t, c.want, tm.Transport())
				assert.Contains(t, tm.Reason(), c.reason)
				// The choice and the reason are logged at INFO.
				assert.Contains(t, logs.String(), "transport="+c.want.String())
				require.NoError(t, tm.Close())
			}
			for _, call := range node.Calls() {
				if c.noMCCall {
					assert.False(t, strings.HasPrefix(call.Op, "cuMulticast"), "multicast entry point called: %v", call)
				}
			}
			if c.errIs == nil && c.want == Multicast {
				assert.Len(t, node.CallsOf("cuMulticastCreate"), 1)
			}
			require.NoError(t, node.CheckNoLeaks())
		})
	}
}

func TestNewCloseCycles(t *testing.T) {
	node := newNode(t, sim.Config{Devices: 2, CallLogLimit: 1})
	cycles := 1000
	if testing.Short() {
		cycles = 100
	}
	ctx := testCtx(t)
	for i := 0; i < cycles; i++ {
		opts := []Option{WithWorkspaceSize(4096)}
		if i%2 == 1 {
			opts = append(opts, WithTransport(Unicast))
		}
		tm, err := New(ctx, node, devices(2), opts...)
		require.NoError(t, err, "cycle %d", i)
		require.NoError(t, tm.Close(), "cycle %d", i)
		if i%100 == 99 {
			require.NoError(t, node.CheckNoLeaks(), "cycle %d", i)
		}
	}
	require.NoError(t, node.CheckNoLeaks())
}

func TestAllocFree(t *testing.T) {
	node := newNode(t, sim.Config{Devices: 3})
	tm, err := New(testCtx(t), node, devices(3), WithWorkspaceSize(smallData))
	require.NoError(t, err)
	defer func() { require.NoError(t, tm.Close()); require.NoError(t, node.CheckNoLeaks()) }()
	assert.Equal(t, uint64(smallData), tm.DataSize())

	a, err := tm.Alloc(1000)
	require.NoError(t, err)
	b, err := tm.Alloc(17)
	require.NoError(t, err)
	assert.Equal(t, uint64(1008), a.Size())
	assert.Equal(t, uint64(32), b.Size())
	assert.Zero(t, a.Offset()%Alignment)
	assert.Zero(t, b.Offset()%Alignment)
	assert.GreaterOrEqual(t, b.Offset(), a.Offset()+a.Size())
	assert.Same(t, tm, a.Team())
	for l := 0; l < 3; l++ {
		bases := tm.ucBases(l)
		assert.Equal(t, bases[l]+kabi.SignalBytes+cuda.DevicePtr(a.Offset()), a.Ptr(l))
		for q := 0; q < 3; q++ {
			assert.Equal(t, bases[q]+kabi.SignalBytes+cuda.DevicePtr(a.Offset()), a.PeerPtr(l, q))
		}
		assert.Equal(t, tm.mcBaseOf(l)+kabi.SignalBytes+cuda.DevicePtr(a.Offset()), a.MulticastPtr(l))
		off, ok := tm.Contains(l, b.Ptr(l), b.Size())
		assert.True(t, ok)
		assert.Equal(t, b.Offset(), off)
		_, ok = tm.Contains(l, bases[l], 16) // the signal area is not data
		assert.False(t, ok)
		_, ok = tm.Contains(l, a.Ptr(l)+cuda.DevicePtr(smallData)-8, 16) // runs off the end
		assert.False(t, ok)
		if l > 0 {
			_, ok = tm.Contains(l, a.Ptr(0), 16) // another rank's copy
			assert.False(t, ok)
		}
	}
	// A buffer written by rank 0 through its pointer is rank 0's copy.
	data := make([]byte, 1000)
	_, _ = rand.Read(data)
	require.NoError(t, tm.Run(JobFunc(func(l int) error {
		if l != 0 {
			return nil
		}
		return cuda.CopyHtoD(tm.Driver(), a.Ptr(0), data)
	})))
	require.NoError(t, tm.Run(JobFunc(func(l int) error {
		got := make([]byte, 1000)
		if err := cuda.CopyDtoH(tm.Driver(), got, a.PeerPtr(l, 0)); err != nil {
			return err
		}
		if !bytes.Equal(got, data) {
			return fmt.Errorf("rank %d reads another value of rank 0's buffer", l)
		}
		return nil
	})))

	require.NoError(t, tm.Free(a))
	require.ErrorIs(t, tm.Free(a), ErrBadFree, "double free")
	_, err = tm.Alloc(0)
	require.ErrorIs(t, err, ErrZeroSize)
	_, err = tm.Alloc(smallData + 1)
	require.ErrorIs(t, err, ErrNoSpace)

	other, err := New(testCtx(t), node, devices(2), WithWorkspaceSize(smallData), WithTransport(Unicast))
	require.NoError(t, err)
	ob, err := other.Alloc(64)
	require.NoError(t, err)
	require.ErrorIs(t, tm.Free(ob), ErrBadFree, "foreign buffer")
	require.NoError(t, other.Close())
	_, err = other.Alloc(64)
	require.ErrorIs(t, err, ErrClosed)
	require.ErrorIs(t, tm.Free(b), nil)
	whole, err := tm.Alloc(smallData)
	require.NoError(t, err, "everything freed: the whole data area is one range again")
	require.NoError(t, tm.Free(whole))
}

// TestBufferAt: BufferAt finds the live buffer that holds a whole range
// of the data area, and none for a range that runs past a buffer's end,
// lies between buffers, in a freed buffer or in a closed team; it
// allocates nothing (it sits on the collectives' launch path).
func TestBufferAt(t *testing.T) {
	node := newNode(t, sim.Config{Devices: 2})
	tm, err := New(testCtx(t), node, devices(2), WithWorkspaceSize(smallData), quiet())
	require.NoError(t, err)
	a, err := tm.Alloc(1000) // 1008 bytes; the next buffer starts at 1024
	require.NoError(t, err)
	b, err := tm.Alloc(64)
	require.NoError(t, err)
	c, err := tm.Alloc(4096)
	require.NoError(t, err)
	for _, tc := range []struct {
		off, n uint64
		want   *Buffer
	}{
		{a.Offset(), a.Size(), &a},
		{a.Offset() + 16, 16, &a},
		{a.Offset() + a.Size() - 8, 8, &a},
		{a.Offset() + a.Size() - 8, 16, nil}, // runs past a's end
		{a.Offset(), a.Size() + 1, nil},
		{a.Offset() + a.Size(), 8, nil}, // the padding before b
		{b.Offset(), 64, &b},
		{b.Offset() + 32, 64, nil},
		{c.Offset() + 4000, 96, &c},
		{c.Offset() + c.Size(), 1, nil}, // free space after c
	} {
		got, ok := tm.bufferAt(tc.off, tc.n)
		if tc.want == nil {
			assert.False(t, ok, "[%d, +%d) is in no buffer, not in %d+%d", tc.off, tc.n, got.Offset(), got.Size())
			continue
		}
		if assert.True(t, ok, "[%d, +%d)", tc.off, tc.n) {
			assert.Equal(t, *tc.want, got, "[%d, +%d)", tc.off, tc.n)
			assert.Same(t, tm, got.Team())
		}
	}
	allocs := testing.AllocsPerRun(100, func() { _, _ = tm.bufferAt(c.Offset()+64, 128) })
	assert.Zero(t, allocs, "BufferAt allocated")

	require.NoError(t, tm.Free(b))
	_, ok := tm.bufferAt(b.Offset(), 16)
	assert.False(t, ok, "a freed buffer")
	require.NoError(t, tm.Close())
	_, ok = tm.bufferAt(a.Offset(), 16)
	assert.False(t, ok, "a closed team")
	require.NoError(t, node.CheckNoLeaks())
}

// TestBrokenState: after Fail, every Alloc and Run returns the same error
// (the first Fail's, matching ErrBroken) until Close, whoever calls Fail
// and from where (a job on a worker, several goroutines at once); Free
// still works; Close frees everything; after Close it is ErrClosed.
func TestBrokenState(t *testing.T) {
	for _, tr := range []Transport{Multicast, Unicast} {
		t.Run(tr.String(), func(t *testing.T) {
			node := newNode(t, sim.Config{Devices: 4})
			tm, err := New(testCtx(t), node, devices(4), WithWorkspaceSize(smallData), WithTransport(tr), quiet())
			require.NoError(t, err)
			buf, err := tm.Alloc(256)
			require.NoError(t, err)
			kept, err := tm.Alloc(4096) // never freed before Close
			require.NoError(t, err)
			require.NoError(t, tm.Err())
			tm.markFailed(nil)
			require.NoError(t, tm.Err(), "Fail(nil) breaks nothing")

			// A job fails the team from its worker (as a collective that
			// timed out on the device does): Run returns the job's error.
			cause := fmt.Errorf("rank 2 timed out in barrier after %v", 5*time.Second)
			err = tm.Run(JobFunc(func(l int) error {
				if l == 2 {
					tm.markFailed(cause)
					return cause
				}
				return nil
			}))
			require.ErrorIs(t, err, cause)
			// Later failures, from many goroutines at once, change nothing.
			var wg sync.WaitGroup
			for i := 0; i < 8; i++ {
				wg.Add(1)
				go func() {
					defer wg.Done()
					tm.markFailed(fmt.Errorf("later failure %d", i))
					_ = tm.Run(JobFunc(func(int) error { return nil }))
					_, _ = tm.Alloc(16)
				}()
			}
			wg.Wait()
			broken := tm.Err()
			require.ErrorIs(t, broken, ErrBroken)
			require.ErrorIs(t, broken, cause)
			assert.NotContains(t, broken.Error(), "later")
			ran := false
			for i := 0; i < 50; i++ {
				err := tm.Run(JobFunc(func(int) error { ran = true; return nil }))
				require.True(t, err == broken, "Run #%d returned %v, not the team's error", i, err)
				_, err = tm.Alloc(uint64(16 * (i + 1)))
				require.True(t, err == broken, "Alloc #%d returned %v, not the team's error", i, err)
				require.True(t, tm.Err() == broken)
			}
			assert.False(t, ran, "a job ran on a broken team")
			require.NoError(t, tm.Free(buf), "Free still works")
			_ = kept
			require.NoError(t, tm.Close())
			require.NoError(t, node.CheckNoLeaks(), "Close of a broken team left something")
			require.ErrorIs(t, tm.Run(JobFunc(func(int) error { return nil })), ErrClosed)
			_, err = tm.Alloc(16)
			require.ErrorIs(t, err, ErrClosed)
			require.NoError(t, tm.Close(), "second Close")
		})
	}
}

type noopJob struct{ ran [kabi.MaxRanks]int }

func (j *noopJob) Run(l int) error { j.ran[l]++; return nil }

func TestRunParallelAndAllocFree(t *testing.T) {
	node := newNode(t, sim.Config{Devices: 4})
	tm, err := New(testCtx(t), node, devices(4), WithWorkspaceSize(smallData), WithTransport(Unicast))
	require.NoError(t, err)
	defer func() { require.NoError(t, tm.Close()) }()

	// Jobs run in parallel: each waits for all four to have started.
	var wg sync.WaitGroup
	wg.Add(4)
	released := make(chan struct{})
	go func() { wg.Wait(); close(released) }()
	err = tm.Run(JobFunc(func(l int) error {
		wg.Done()
		select {
		case <-released:
			return nil
		case <-time.After(10 * time.Second):
			return fmt.Errorf("local rank %d: the others never started", l)
		}
	}))
	require.NoError(t, err)

	// Each job runs with its device's context current on its thread.
	require.NoError(t, tm.Run(JobFunc(func(l int) error {
		c, err := tm.Driver().CtxGetCurrent()
		if err != nil {
			return err
		}
		if c != tm.Context(l) || c == 0 {
			return fmt.Errorf("local rank %d: context %#x current, want %#x", l, c, tm.Context(l))
		}
		return nil
	})))

	// An error names its rank; a panic becomes an error.
	err = tm.Run(JobFunc(func(l int) error {
		if l == 2 {
			return fmt.Errorf("rank %d failed", l)
		}
		return nil
	}))
	require.EqualError(t, err, "rank 2 failed")
	err = tm.Run(JobFunc(func(l int) error {
		if l == 1 {
			panic("boom")
		}
		return nil
	}))
	require.ErrorContains(t, err, "job panicked: boom")

	job := &noopJob{}
	allocs := testing.AllocsPerRun(200, func() {
		if err := tm.Run(job); err != nil {
			t.Fatal(err)
		}
	})
	assert.Zero(t, allocs, "Run allocates")
	for l := 0; l < 4; l++ {
		assert.Equal(t, 201, job.ran[l])
	}
}

func TestFootprintAndLogs(t *testing.T) {
	node := newNode(t, sim.Config{Devices: 2, MulticastGranularityRecommended: 8 << 20})
	var logs bytes.Buffer
	l := slog.New(slog.NewTextHandler(&logs, &slog.HandlerOptions{Level: LevelTrace}))
	tm, err := New(testCtx(t), node, devices(2), WithWorkspaceSize(3<<20), WithLogger(l))
	require.NoError(t, err)
	fp := tm.Footprint()
	// 64 KiB + 3 MiB rounded up to the 8 MiB recommended multicast granularity.
	assert.Equal(t, Footprint{Workspace: 8 << 20, Signal: kabi.SignalBytes, Data: 3 << 20,
		Padding: 8<<20 - kabi.SignalBytes - 3<<20, PeerVA: 8 << 20, MulticastVA: 8 << 20}, fp)
	assert.Equal(t, uint64(8<<20), tm.layout().Size())
	assert.Equal(t, 132, tm.SMCount())
	assert.Same(t, l, tm.Logger())
	require.NoError(t, tm.Close())
	out := logs.String()
	for _, step := range []string{stepQuery, stepMCCreate, stepMCAdd, stepMCBind, stepMCMap, stepMapOwn, stepMapPeers} {
		assert.Contains(t, out, "team: "+step, "setup step not logged")
	}
	assert.Contains(t, out, "team: ready")
	assert.Contains(t, out, "padding=")
	// TRACE: every driver call, with arguments and results.
	assert.Contains(t, out, "call=MulticastCreate")
	assert.Contains(t, out, "call=MemMap")
	assert.Contains(t, out, "result=ok")
	require.NoError(t, node.CheckNoLeaks())
}

func TestNewBadDevices(t *testing.T) {
	node := newNode(t, sim.Config{Devices: 4, NoPeer: [][2]int{{1, 3}}})
	_, err := New(testCtx(t), node, nil)
	require.ErrorIs(t, err, ErrBadDevices)
	_, err = New(testCtx(t), node, []cuda.Device{0, 1, 0})
	require.ErrorIs(t, err, ErrBadDevices)
	_, err = New(testCtx(t), node, devices(9))
	require.ErrorIs(t, err, ErrBadDevices)
	_, err = New(testCtx(t), node, []cuda.Device{0, 7}, WithWorkspaceSize(smallData))
	require.Error(t, err)
	assert.Contains(t, err.Error(), "device 7")
	_, err = New(testCtx(t), node, devices(4), WithWorkspaceSize(smallData))
	require.ErrorIs(t, err, ErrNoPeerAccess)
	assert.Contains(t, err.Error(), "rank 1 (device 1")
	assert.Contains(t, err.Error(), "rank 3 (device 3")
	require.NoError(t, node.CheckNoLeaks())
}

// probeKernel is a test kernel for the sim: mode 0 is a multimem.st of 16
// bytes at addr; mode 1 a multimem load of 16 bytes at addr from every
// bound copy, written (concatenated) to out through a plain store.
const probeKernel = "nvls_team_test_multimem_probe"

var probePTX = []byte(".version 8.1\n.target sm_90\n.address_size 64\n.visible .entry " + probeKernel + "(.param .align 8 .b8 p[40]) { ret; }\n")

type probeParams struct {
	Addr, Mode, Out uint64
	Pattern         [16]byte
}

// runProbe is the probe kernel, on the nodes of newNode.
func runProbe(l *sim.Launch) error {
	var p probeParams
	if len(l.Params) != int(unsafe.Sizeof(p)) {
		return fmt.Errorf("params of %d bytes", len(l.Params))
	}
	p = *(*probeParams)(unsafe.Pointer(&l.Params[0]))
	if p.Mode == 0 {
		return l.Mem.MultimemStore(cuda.DevicePtr(p.Addr), p.Pattern[:])
	}
	vals, err := l.Mem.MultimemLoad(cuda.DevicePtr(p.Addr), 16)
	if err != nil {
		return err
	}
	return l.Mem.Store(cuda.DevicePtr(p.Out), bytes.Join(vals, nil))
}

// launchProbe runs the probe kernel on the calling worker's device.
func launchProbe(d cuda.Driver, p *probeParams) error {
	m, err := d.ModuleLoadData(probePTX)
	if err != nil {
		return err
	}
	defer func() { _ = d.ModuleUnload(m) }()
	f, err := d.ModuleGetFunction(m, probeKernel)
	if err != nil {
		return err
	}
	if err := d.LaunchKernel(f, cuda.D1(1), cuda.D1(1), 0, 0, unsafe.Pointer(p), unsafe.Sizeof(*p)); err != nil {
		return err
	}
	return d.CtxSynchronize()
}

// TestMulticastAliasReachesEveryRank: through the MC alias, one multimem
// store lands in every rank's workspace, and a multimem load sees every
// rank's value: the object is really bound and mapped on every device.
func TestMulticastAliasReachesEveryRank(t *testing.T) {
	node := newNode(t, sim.Config{Devices: 4})
	tm, err := New(testCtx(t), node, devices(4), WithWorkspaceSize(smallData))
	require.NoError(t, err)
	require.Equal(t, Multicast, tm.Transport())
	buf, err := tm.Alloc(3 * 4096)
	require.NoError(t, err)
	vals := make([][]byte, 4)
	for r := range vals {
		vals[r] = make([]byte, 16)
		_, _ = rand.Read(vals[r])
	}
	var pattern [16]byte
	_, _ = rand.Read(pattern[:])
	require.NoError(t, tm.Run(JobFunc(func(l int) error {
		return cuda.CopyHtoD(tm.Driver(), buf.Ptr(l), vals[l])
	})))
	got := make([]byte, 64)
	require.NoError(t, tm.Run(JobFunc(func(l int) error {
		switch l {
		case 1: // load-reduce's load half, from rank 1
			p := probeParams{Addr: uint64(buf.MulticastPtr(l)), Mode: 1, Out: uint64(buf.Ptr(l)) + 4096}
			if err := launchProbe(tm.Driver(), &p); err != nil {
				return err
			}
			return cuda.CopyDtoH(tm.Driver(), got, buf.Ptr(l)+4096)
		case 0: // a store from rank 0, to everyone
			p := probeParams{Addr: uint64(buf.MulticastPtr(l)) + 8192, Mode: 0, Pattern: pattern}
			return launchProbe(tm.Driver(), &p)
		}
		return nil
	})))
	var loaded [][]byte
	for i := 0; i < 4; i++ {
		loaded = append(loaded, got[16*i:16*(i+1)])
	}
	assert.ElementsMatch(t, vals, loaded, "a multimem load sees every rank's copy")
	require.NoError(t, tm.Run(JobFunc(func(l int) error {
		b := make([]byte, 16)
		if err := cuda.CopyDtoH(tm.Driver(), b, buf.Ptr(l)+8192); err != nil {
			return err
		}
		if !bytes.Equal(b, pattern[:]) {
			return fmt.Errorf("rank %d: the multimem store did not land", l)
		}
		return nil
	})))
	require.NoError(t, tm.Close())
	require.NoError(t, node.CheckNoLeaks())
}

// TestFaultAtEveryCloseCall: one failed driver call during Close is
// reported, and the retry pass still frees everything.
func TestFaultAtEveryCloseCall(t *testing.T) {
	for _, n := range []int{2, 4} {
		for _, tc := range []struct {
			name string
			opts []Option
		}{
			{"multicast", nil},
			{"unicast", []Option{WithTransport(Unicast)}},
		} {
			t.Run(fmt.Sprintf("%d/%s", n, tc.name), func(t *testing.T) {
				opts := append([]Option{WithWorkspaceSize(smallData), quiet()}, tc.opts...)
				node := newNode(t, sim.Config{Devices: n})
				tm, err := New(testCtx(t), node, devices(n), opts...)
				require.NoError(t, err)
				node.ResetCalls()
				require.NoError(t, tm.Close())
				total := node.CallCount()
				require.NoError(t, node.CheckNoLeaks())
				require.Greater(t, total, 4*n)
				for nth := 1; nth <= total; nth++ {
					node, tm, failed, err := closeWithFault(t, n, devices(n), opts, nth)
					assert.Contains(t, err.Error(), stepTeardown)
					assert.ErrorIs(t, err, &cuda.Error{Code: cuda.ErrorUnknown})
					assert.NoError(t, node.CheckNoLeaks(), "call %d (%s) leaked; Close said %v", nth, failed, err)
					assert.NoError(t, tm.Close(), "a second Close after a failed one")
					_ = node.Close()
				}
			})
		}
	}
}

// closeWithFault brings a team of devs up on a fresh simulated node of
// gpus devices and closes it with the nth driver call of Close failing:
// it checks that Close reported that call's failure and returns the node,
// the team, the failed call's name and Close's error.
func closeWithFault(t *testing.T, gpus int, devs []cuda.Device, opts []Option, nth int) (*sim.Node, *Team, string, error) {
	t.Helper()
	node := sim.New(sim.Config{Devices: gpus})
	tm, err := New(testCtx(t), node, devs, opts...)
	require.NoError(t, err)
	node.ResetCalls()
	node.FailNth(nth, cuda.ErrorUnknown)
	err = tm.Close()
	var failed string
	for _, c := range node.Calls() {
		if c.Injected {
			failed = c.Op
		}
	}
	require.NotEmpty(t, failed, "call %d", nth)
	require.Error(t, err, "call %d (%s): Close hid the failure", nth, failed)
	assert.Contains(t, err.Error(), failed)
	return node, tm, failed, err
}

// Ranks brought up one by one in one process (NewRank over NewInProcess)
// close independently, in any order: rank 0, which created the multicast
// object, may close first. They hold their own references (FDs exported
// and imported, as across processes), so the others still unbind and
// release cleanly.
func TestNewRankInOneProcessCreatorClosesFirst(t *testing.T) {
	node := newNode(t, sim.Config{Devices: 3})
	teams, err := newRanks(testCtx(t), node, 3, true, WithWorkspaceSize(smallData), WithTransport(Multicast))
	require.NoError(t, err)
	require.Equal(t, Multicast, teams[0].Transport())
	assert.Len(t, node.CallsOf("cuMemImportFromShareableHandle"), 2+3*2, "the object and the workspaces imported as FDs")
	for r := range teams {
		require.NoError(t, teams[r].Close(), "rank %d closes (rank 0 first)", r)
		teams[r] = nil
	}
	require.NoError(t, node.CheckNoLeaks())
}
