package collectives

import (
	"context"
	"encoding/binary"
	"errors"
	"os"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/nvls-go/nvls/cuda"
	"github.com/nvls-go/nvls/cuda/sim"
	"github.com/nvls-go/nvls/kernels"
	"github.com/nvls-go/nvls/team"
)

// rankTeams is a simulated node and one team per rank (team.NewRank over
// in-process bootstraps, the shape of a job under mpirun), unicast, 2
// MiB of data each. The bootstraps stay open until the test ends; the
// cleanup closes the teams and checks that the node holds nothing.
type rankTeams struct {
	node  *sim.Node
	teams []*team.Team
}

func newRankTeams(t *testing.T, n int, opts ...team.Option) *rankTeams {
	t.Helper()
	node, boots := newPerRankNode(t, n, n)
	rt := &rankTeams{node: node, teams: make([]*team.Team, n)}
	errs := make([]error, n)
	opts = append([]team.Option{team.WithTransport(team.Unicast), team.WithWorkspaceSize(2 << 20), team.WithLogger(quietLogger())}, opts...)
	var wg sync.WaitGroup
	for r := range n {
		wg.Go(func() {
			rt.teams[r], errs[r] = team.NewRank(context.Background(), node, cuda.Device(r), boots[r], opts...)
		})
	}
	wg.Wait()
	t.Cleanup(func() {
		for r, tm := range rt.teams {
			if tm != nil {
				assert.NoError(t, tm.Close(), "rank %d", r)
			}
		}
	})
	require.NoError(t, errors.Join(errs...))
	return rt
}

// newComms calls NewContext on the given ranks at once, rank r with
// opts(r); the others do not call it.
func (rt *rankTeams) newComms(ctx context.Context, ranks []int, opts func(r int) []Option) ([]*Comm, []error) {
	comms := make([]*Comm, len(rt.teams))
	errs := make([]error, len(rt.teams))
	var wg sync.WaitGroup
	for _, r := range ranks {
		wg.Go(func() { comms[r], errs[r] = NewContext(ctx, rt.teams[r], opts(r)...) })
	}
	wg.Wait()
	return comms, errs
}

func (rt *rankTeams) all() []int {
	out := make([]int, len(rt.teams))
	for r := range out {
		out[r] = r
	}
	return out
}

// live is what a failed New must leave as it found: the node's modules,
// streams and memory.
func (rt *rankTeams) live() sim.Live {
	l := rt.node.Live()
	return sim.Live{Modules: l.Modules, Streams: l.Streams, DeviceBytes: l.DeviceBytes}
}

// checkFree checks that every team's data area is wholly free again
// (nothing of a failed New kept).
func (rt *rankTeams) checkFree(t *testing.T) {
	t.Helper()
	for r, tm := range rt.teams {
		b, err := tm.Alloc(tm.DataSize())
		require.NoError(t, err, "rank %d: the data area is not wholly free", r)
		require.NoError(t, tm.Free(b))
	}
}

// works makes a Comm on every rank with the same options, runs a barrier
// on every rank and closes the Comms.
func (rt *rankTeams) works(t *testing.T, opts ...Option) {
	t.Helper()
	comms, errs := rt.newComms(context.Background(), rt.all(), func(int) []Option { return opts })
	require.NoError(t, errors.Join(errs...))
	var wg sync.WaitGroup
	for r, c := range comms {
		wg.Go(func() {
			ctx := context.Background()
			errs[r] = c.Barrier(ctx, []cuda.Stream{c.ranks[0].statusStream})
			if errs[r] == nil {
				errs[r] = c.Sync(ctx, []cuda.Stream{c.ranks[0].statusStream})
			}
		})
	}
	wg.Wait()
	for r, c := range comms {
		errs[r] = errors.Join(errs[r], c.Close())
	}
	require.NoError(t, errors.Join(errs...))
}

// One rank's option differs: every rank's New fails with the same error,
// naming the setting, the ranks and their values and sources; nothing is
// left behind; a New with matching options then works on the same teams.
func TestNewRefusesConfigMismatch(t *testing.T) {
	base := []Option{WithStageBytes(64 << 10)}
	for _, tc := range []struct {
		name     string
		odd      []Option // rank 1's, after base
		settings []string
		want     []string
	}{
		{"ll", []Option{WithLLMax(32 << 10)}, []string{"LL max"},
			[]string{"LL max: 131072 bytes (default) on ranks 0, 2 vs 32768 bytes (option WithLLMax) on rank 1"}},
		{"ll-off", []Option{WithLLMax(0)}, []string{"LL max"},
			[]string{"0 (LL off) (option WithLLMax) on rank 1"}},
		{"oneshot", []Option{WithOneShotMax(4096)}, []string{"one-shot max"},
			[]string{"one-shot max: 131072 bytes (default) on ranks 0, 2 vs 4096 bytes (option WithOneShotMax) on rank 1"}},
		{"grid", []Option{WithMaxGrid(2)}, []string{"max grid"},
			[]string{"max grid: 132 blocks (default) on ranks 0, 2 vs 2 blocks (option WithMaxGrid) on rank 1"}},
		{"grid-clamped", []Option{WithMaxGrid(200)}, nil, nil}, // clamped to the SM count: the same grid
		{"min-grid", []Option{WithMinGrid(3)}, []string{"min grid"},
			[]string{"min grid: 32 blocks (default) on ranks 0, 2 vs 3 blocks (option WithMinGrid) on rank 1"}},
		{"timeout", []Option{WithTimeout(3 * time.Second)}, []string{"timeout"},
			[]string{"timeout: 10s (default) on ranks 0, 2 vs 3s (option WithTimeout) on rank 1"}},
		{"stage", []Option{WithStageBytes(128 << 10)}, []string{"stage bytes"},
			[]string{"stage bytes: 65536 bytes (option WithStageBytes) on ranks 0, 2 vs 131072 bytes (option WithStageBytes) on rank 1"}},
		{"copy-engine", []Option{WithCopyEngineMin(1 << 20)}, []string{"copy-engine min"},
			[]string{"copy-engine min: 67108864 bytes (default) on ranks 0, 2 vs 1048576 bytes (option WithCopyEngineMin) on rank 1"}},
		{"ll-two", []Option{WithLLTwoMax(0)}, []string{"LL two-step max"},
			[]string{"LL two-step max: 262144 bytes (default) on ranks 0, 2 vs 0 bytes (option WithLLTwoMax) on rank 1"}},
		{"ring", []Option{WithRingMin(1 << 20), WithRingBytes(1 << 20)}, []string{"ring min", "ring bytes"},
			[]string{"ring min: 0 bytes (default) on ranks 0, 2 vs 1048576 bytes (option WithRingMin) on rank 1",
				"ring bytes: 33554432 bytes (default) on ranks 0, 2 vs 1048576 bytes (option WithRingBytes) on rank 1"}},
		{"reduce-pull", []Option{WithReducePullMin(1 << 20)}, []string{"reduce pull min"},
			[]string{"reduce pull min: 0 bytes (default) on ranks 0, 2 vs 1048576 bytes (option WithReducePullMin) on rank 1"}},
		{"several", []Option{WithLLMax(0), WithMaxGrid(7), WithTimeout(time.Minute)}, []string{"LL max", "max grid", "timeout"},
			[]string{"on rank 1", "7 blocks (option WithMaxGrid)", "1m0s (option WithTimeout)"}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rt := newRankTeams(t, 3, team.WithWorkspaceSize(4<<20)) // room for the ring case's FIFO
			before := rt.live()
			comms, errs := rt.newComms(context.Background(), rt.all(), func(r int) []Option {
				if r == 1 {
					return append(append([]Option(nil), base...), tc.odd...)
				}
				return base
			})
			if tc.settings == nil {
				require.NoError(t, errors.Join(errs...))
				for _, c := range comms {
					require.NoError(t, c.Close())
				}
				return
			}
			for r, err := range errs {
				require.Error(t, err, "rank %d", r)
				assert.Nil(t, comms[r])
				assert.ErrorIs(t, err, ErrConfigMismatch)
				assert.ErrorIs(t, err, ErrInvalid)
				var me *ConfigMismatchError
				require.ErrorAs(t, err, &me)
				var names []string
				for _, s := range me.Settings {
					names = append(names, s.Setting)
					require.Len(t, s.Values, 3)
					for q, v := range s.Values {
						assert.Equal(t, q, v.Rank)
						assert.NotEmpty(t, v.Value)
						assert.NotEmpty(t, v.Source)
					}
				}
				assert.Equal(t, tc.settings, names, "rank %d: %v", r, err)
				for _, w := range tc.want {
					assert.Contains(t, err.Error(), w, "rank %d", r)
				}
				assert.Equal(t, errs[0].Error(), err.Error(), "every rank says the same")
			}
			t.Logf("%v", errs[0])
			assert.Equal(t, before, rt.live(), "a refused New releases its modules and streams")
			rt.checkFree(t)
			rt.works(t, base...)
		})
	}
}

// TestNewRefusesLLAreaMismatch: the LL area's lines, which the kernels'
// slot offsets take from each rank's own, are agreed on too. Rank 1's
// workspace has no room for the default two-step broadcast's area (a
// buffer of its own took it), so its area falls back to the LL limit's
// lines: every rank's New fails naming the area alone.
func TestNewRefusesLLAreaMismatch(t *testing.T) {
	rt := newRankTeams(t, 3, team.WithWorkspaceSize(8<<20))
	buf, err := rt.teams[1].Alloc(4 << 20)
	require.NoError(t, err)
	comms, errs := rt.newComms(context.Background(), rt.all(), func(int) []Option { return []Option{WithStageBytes(64 << 10)} })
	for r, err := range errs {
		assert.Nil(t, comms[r])
		var me *ConfigMismatchError
		require.ErrorAs(t, err, &me, "rank %d", r)
		require.Len(t, me.Settings, 1, "rank %d: %v", r, err)
		assert.Equal(t, "LL area", me.Settings[0].Setting)
		assert.Contains(t, err.Error(), "65537 lines a slot (the LL limits and the workspace) on ranks 0, 2 vs 16384 lines a slot", "rank %d", r)
	}
	require.NoError(t, rt.teams[1].Free(buf))
}

// A rank that never calls New: the others' New fails by the team's setup
// timeout (or NewContext's ctx), naming it, and releases what it took.
func TestNewMissingRank(t *testing.T) {
	t.Run("setup-timeout", func(t *testing.T) {
		const timeout = 300 * time.Millisecond
		rt := newRankTeams(t, 3, team.WithSetupTimeout(timeout))
		before := rt.live()
		start := time.Now()
		_, errs := rt.newComms(context.Background(), []int{0, 1}, func(int) []Option { return []Option{WithStageBytes(64 << 10)} })
		took := time.Since(start)
		assert.GreaterOrEqual(t, took, timeout)
		assert.Less(t, took, timeout+5*time.Second)
		for _, r := range []int{0, 1} {
			checkMissing(t, errs[r], r, []int{2})
		}
		assert.Equal(t, before, rt.live())
		rt.checkFree(t)
		// The bootstrap is broken now: the late rank is refused at once,
		// with the same story.
		_, err := New(rt.teams[2], WithStageBytes(64<<10))
		checkMissing(t, err, 2, []int{2})
		assert.Equal(t, before, rt.live())
	})
	t.Run("context", func(t *testing.T) {
		rt := newRankTeams(t, 2) // no setup timeout: ctx bounds it
		before := rt.live()
		// Long enough for New's own part, however loaded the machine (a
		// ctx that ends before the exchange names nobody).
		ctx, cancel := context.WithTimeout(context.Background(), 3*time.Second)
		defer cancel()
		_, errs := rt.newComms(ctx, []int{1}, func(int) []Option { return []Option{WithStageBytes(64 << 10)} })
		checkMissing(t, errs[1], 1, []int{0})
		assert.Equal(t, before, rt.live())
	})
}

func checkMissing(t *testing.T, err error, r int, missing []int) {
	t.Helper()
	require.Error(t, err, "rank %d", r)
	var mr *team.MissingRanksError
	require.ErrorAs(t, err, &mr, "rank %d: %v", r, err)
	assert.Equal(t, missing, mr.Missing, "rank %d: %v", r, err)
	assert.ErrorIs(t, err, team.ErrPeerMissing)
	assert.ErrorIs(t, err, context.DeadlineExceeded)
	assert.Contains(t, err.Error(), "collectives: New: agreeing on the configuration")
}

// A rank whose own part of New fails (a bad option, a driver error)
// still tells the others, which fail at once naming it rather than wait
// for the deadline; a corrected New works on the same teams.
func TestNewRankFailureReachesEveryRank(t *testing.T) {
	for _, tc := range []struct {
		name  string
		opts  func(r int) []Option
		fault func(n *sim.Node) // a driver fault on whichever rank meets it
		want  string
		is    error
	}{
		{name: "bad-option", opts: func(r int) []Option {
			if r == 2 {
				return []Option{WithMaxGrid(0)}
			}
			return nil
		}, want: "WithMaxGrid(0)", is: ErrInvalid},
		{name: "stage-too-big", opts: func(r int) []Option {
			if r == 0 {
				return []Option{WithStageBytes(2 << 20)}
			}
			return nil
		}, want: "do not fit", is: ErrInvalid},
		{name: "no-room-for-ll", opts: func(r int) []Option {
			if r == 1 {
				return []Option{WithStageBytes(1 << 20)} // the staging areas take the whole data area
			}
			return nil
		}, want: "allocating the LL area", is: team.ErrNoSpace},
		{name: "module-load", fault: func(n *sim.Node) { n.FailAt("cuModuleLoadData", 2, cuda.ErrorUnknown) }, want: "cuModuleLoadData", is: &cuda.Error{Code: cuda.ErrorUnknown}},
		{name: "get-function", fault: func(n *sim.Node) { n.FailAt("cuModuleGetFunction", 40, cuda.ErrorUnknown) }, want: "cuModuleGetFunction", is: &cuda.Error{Code: cuda.ErrorUnknown}},
		{name: "stream-create", fault: func(n *sim.Node) { n.FailAt("cuStreamCreate", 3, cuda.ErrorOutOfMemory) }, want: "status stream", is: cuda.ErrOutOfMemory},
	} {
		t.Run(tc.name, func(t *testing.T) {
			rt := newRankTeams(t, 3, team.WithSetupTimeout(time.Minute))
			before := rt.live()
			base := []Option{WithStageBytes(64 << 10)}
			opts := func(r int) []Option {
				if tc.opts == nil {
					return base
				}
				return append(append([]Option(nil), base...), tc.opts(r)...)
			}
			if tc.fault != nil {
				tc.fault(rt.node)
			}
			start := time.Now()
			comms, errs := rt.newComms(context.Background(), rt.all(), opts)
			rt.node.ClearFaults()
			assert.Less(t, time.Since(start), 20*time.Second, "nobody waits for the deadline")
			failed := -1
			for r, err := range errs {
				require.Error(t, err, "rank %d", r)
				assert.Nil(t, comms[r])
				if !errors.Is(err, team.ErrPeerFailed) {
					require.Equal(t, -1, failed, "ranks %d and %d both failed on their own: %v / %v", failed, r, errs[max(failed, 0)], err)
					failed = r
				}
			}
			require.NotEqual(t, -1, failed, "no rank failed on its own: %v", errs)
			assert.ErrorIs(t, errs[failed], tc.is)
			assert.Contains(t, errs[failed].Error(), tc.want)
			for r, err := range errs {
				if r == failed {
					continue
				}
				var pe *team.PeerError
				require.ErrorAs(t, err, &pe, "rank %d", r)
				assert.Equal(t, failed, pe.Rank)
				assert.Equal(t, "collectives.New", pe.Step)
				assert.Contains(t, pe.Msg, tc.want)
			}
			t.Logf("rank %d: %v; others: %v", failed, errs[failed], errs[(failed+1)%3])
			assert.Equal(t, before, rt.live())
			rt.checkFree(t)
			rt.works(t, base...)
		})
	}
}

// The per-rank pieces of the agreement: a rank's record from its resolved
// configuration (options and environment), as New builds it on a team of
// size ranks with the default sim's SM count.
func recordFor(t *testing.T, size int, hasLL bool, opts ...Option) []byte {
	t.Helper()
	cfg, err := resolve(opts)
	require.NoError(t, err)
	cfg = cfg.sized(size)
	c := &Comm{cfg: cfg, size: size, flavor: kernels.Unicast, stageBytes: cfg.stage, ptxLL: hasLL}
	c.maxGrid = uint64(gridLimit(&c.cfg, sim.DefaultSMCount, 1))
	if hasLL {
		c.llMax = c.cfg.llMax
	}
	return c.wire().encode(nil)
}

// Environment variables are per process; a test cannot give goroutines
// different ones, so this compares the records of configurations resolved
// one after the other with different environments.
func TestVerdictNamesEnvironmentVariables(t *testing.T) {
	for _, tc := range []struct {
		env, value string
		want       string
	}{
		{EnvLLMax, "32K", "LL max: 32768 bytes (env NVLS_LL_MAX) on rank 0 vs 131072 bytes (default) on ranks 1, 2"},
		{EnvOneShotMax, "8K", "one-shot max: 8192 bytes (env NVLS_ONESHOT_MAX) on rank 0 vs 131072 bytes (default) on ranks 1, 2"},
		{EnvGrid, "16", "max grid: 16 blocks (env NVLS_GRID) on rank 0 vs 132 blocks (default) on ranks 1, 2"},
		{EnvGrid, "1000", ""}, // out of range: New's own error, before any agreement
		{EnvTimeout, "2s", "timeout: 2s (env NVLS_TIMEOUT) on rank 0 vs 10s (default) on ranks 1, 2"},
	} {
		t.Run(tc.env+"="+tc.value, func(t *testing.T) {
			t.Setenv(tc.env, tc.value)
			if tc.want == "" {
				_, err := resolve(nil)
				require.ErrorIs(t, err, ErrBadEnv)
				return
			}
			r0 := recordFor(t, 3, true)
			// An option wins over the variable: same value as the default.
			var win Option
			switch tc.env {
			case EnvLLMax:
				win = WithLLMax(DefaultLLMax)
			case EnvOneShotMax:
				win = WithOneShotMax(DefaultOneShotMax)
			case EnvGrid:
				win = WithMaxGrid(DefaultMaxGrid)
			case EnvTimeout:
				win = WithTimeout(DefaultTimeout)
			}
			r1opt := recordFor(t, 3, true, win)
			require.NoError(t, os.Unsetenv(tc.env)) // t.Setenv restores it
			r1 := recordFor(t, 3, true)
			r2 := recordFor(t, 3, true)

			err := verdict([][]byte{r0, r1, r2}, 3)
			require.ErrorIs(t, err, ErrConfigMismatch)
			assert.Contains(t, err.Error(), tc.want)
			var me *ConfigMismatchError
			require.ErrorAs(t, err, &me)
			require.Len(t, me.Settings, 1)
			assert.True(t, strings.HasPrefix(me.Settings[0].Values[0].Source, "env "), me.Settings[0].Values[0].Source)

			// The option's value agrees with the default; the same value
			// from the variable and from an option agree too.
			assert.NoError(t, verdict([][]byte{r1opt, r1, r2}, 3))
		})
	}
	t.Run("same-value-different-sources", func(t *testing.T) {
		t.Setenv(EnvLLMax, "32K")
		r0 := recordFor(t, 3, true)
		require.NoError(t, os.Unsetenv(EnvLLMax))
		r1 := recordFor(t, 3, true, WithLLMax(32<<10))
		assert.NoError(t, verdict([][]byte{r0, r1, r1}, 3))
	})
}

// The records: what reads as a mismatch, a failed rank, or garbage.
func TestVerdictRecords(t *testing.T) {
	ok := recordFor(t, 2, true)
	assert.Len(t, ok, binary.Size(wireConfig{}), "a fixed-size record")
	w, msg, err := decodeWire(ok)
	require.NoError(t, err)
	assert.Empty(t, msg)
	assert.Equal(t, uint64(DefaultOneShotMax2), w.OneShotMax, "2 ranks: the 2-rank default")
	assert.Equal(t, uint64(DefaultLLMax2), w.LLMax, "2 ranks: the 2-rank default")
	assert.NoError(t, verdict([][]byte{ok, ok}, 2))

	t.Run("ptx-without-ll", func(t *testing.T) {
		err := verdict([][]byte{ok, recordFor(t, 2, false)}, 2)
		require.ErrorIs(t, err, ErrConfigMismatch)
		assert.Contains(t, err.Error(), "LL max: 524288 bytes (default) on rank 0 vs 0 (LL off: the loaded PTX has no LL kernels, 524288 bytes asked) (default) on rank 1")
		// LL off by option on both: the PTX does not matter.
		off := recordFor(t, 2, true, WithLLMax(0))
		assert.NoError(t, verdict([][]byte{off, recordFor(t, 2, false, WithLLMax(0))}, 2))
	})
	t.Run("flavor", func(t *testing.T) {
		w, _, err := decodeWire(ok)
		require.NoError(t, err)
		w.Flavor = uint8(kernels.Multicast)
		err = verdict([][]byte{ok, w.encode(nil)}, 2)
		require.ErrorIs(t, err, ErrConfigMismatch)
		assert.Contains(t, err.Error(), "kernel flavor: unicast (the team's transport) on rank 0 vs multicast (the team's transport) on rank 1")
	})
	t.Run("clamped-grid", func(t *testing.T) {
		w, _, err := decodeWire(recordFor(t, 2, true, WithMaxGrid(200)))
		require.NoError(t, err)
		assert.Equal(t, uint32(132), w.MaxGrid)
		w.MaxGrid = 66 // as on a device shared by 2 ranks
		err = verdict([][]byte{ok, w.encode(nil)}, 2)
		assert.ErrorContains(t, err, "66 blocks (clamped from 200) (option WithMaxGrid) on rank 1")
	})
	t.Run("failed", func(t *testing.T) {
		failed := wireConfig{}.encode(errors.New("collectives: NVLS_GRID=\"x\": bad"))
		err := verdict([][]byte{ok, failed, failed}, 3)
		var pe *team.PeerError
		require.ErrorAs(t, err, &pe)
		assert.Equal(t, 1, pe.Rank)
		assert.Equal(t, `collectives: NVLS_GRID="x": bad`, pe.Msg)
		assert.ErrorIs(t, err, team.ErrPeerFailed)
		assert.Contains(t, err.Error(), "rank 2 failed")
		long := wireConfig{}.encode(errors.New(strings.Repeat("x", 10000)))
		_, msg, err := decodeWire(long)
		require.NoError(t, err)
		assert.Len(t, msg, maxFailMsg+3)
	})
	t.Run("garbage", func(t *testing.T) {
		err := verdict([][]byte{ok, []byte("abc")}, 2)
		assert.ErrorContains(t, err, "rank 1 sent 3 bytes that are not a collectives configuration")
		other := append([]byte(nil), ok...)
		other[4] = 99 // version
		assert.ErrorContains(t, verdict([][]byte{other, ok}, 2), "rank 0 sent a configuration of version 99")
		assert.ErrorContains(t, verdict([][]byte{ok, append(ok[:len(ok):len(ok)], 0)}, 2), "rank 1 sent 1 bytes after its configuration")
		assert.ErrorContains(t, verdict([][]byte{ok, recordFor(t, 3, true)}, 2), "rank 1 runs a team of 3 ranks")
	})
}
