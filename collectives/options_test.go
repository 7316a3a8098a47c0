package collectives

import (
	"math"
	"os"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/nvls-go/nvls/internal/kabi"
	"github.com/nvls-go/nvls/kernels"
	"github.com/nvls-go/nvls/team"
)

// TestEnv: each variable's good values, bad values (a *team.EnvError
// naming the variable, its value and what it takes, matching ErrBadEnv and
// team.ErrBadEnv), and options winning over it. Durations take bare
// seconds as NVLS_SETUP_TIMEOUT does (issue 15: NVLS_TIMEOUT=5 was
// refused).
func TestEnv(t *testing.T) {
	for _, tc := range []struct {
		env, value string
		ok         bool
		check      func(t *testing.T, c config)
	}{
		{EnvOneShotMax, "262144", true, func(t *testing.T, c config) { assert.Equal(t, uint64(262144), c.oneShotMax) }},
		{EnvOneShotMax, "64K", true, func(t *testing.T, c config) { assert.Equal(t, uint64(64<<10), c.oneShotMax) }},
		{EnvOneShotMax, "1MiB", true, func(t *testing.T, c config) { assert.Equal(t, uint64(1<<20), c.oneShotMax) }},
		{EnvOneShotMax, " 2g ", true, func(t *testing.T, c config) { assert.Equal(t, uint64(2<<30), c.oneShotMax) }},
		{EnvOneShotMax, "0", true, func(t *testing.T, c config) { assert.Equal(t, uint64(0), c.oneShotMax) }},
		{EnvOneShotMax, "lots", false, nil},
		{EnvOneShotMax, "-5", false, nil},
		{EnvOneShotMax, "99999999999999999999", false, nil},
		{EnvOneShotMax, "17179869184G", false, nil},
		{EnvOneShotMax, "", true, func(t *testing.T, c config) { assert.Equal(t, fromDefault, c.oneShotFrom, "empty is unset") }},
		{EnvOneShotMax, "1.5M", false, nil},
		{EnvLLTwoMax, "64K", true, func(t *testing.T, c config) { assert.Equal(t, uint64(64<<10), c.llTwoMax) }},
		{EnvLLTwoMax, "0", true, func(t *testing.T, c config) { assert.Equal(t, uint64(0), c.llTwoMax) }},
		{EnvLLTwoMax, "lots", false, nil},
		{EnvLLTwoBcastMax, "2M", true, func(t *testing.T, c config) { assert.Equal(t, uint64(2<<20), c.llTwoBcastMax) }},
		{EnvLLTwoBcastMax, "0", true, func(t *testing.T, c config) { assert.Equal(t, uint64(0), c.llTwoBcastMax) }},
		{EnvLLTwoBcastMax, "lots", false, nil},
		{EnvStageBytes, "8M", true, func(t *testing.T, c config) {
			assert.Equal(t, uint64(8<<20), c.stage)
			assert.Equal(t, fromEnv, c.stageFrom)
		}},
		{EnvStageBytes, "1K", false, nil},
		{EnvStageBytes, "lots", false, nil},
		{EnvLLMax, "16K", true, func(t *testing.T, c config) { assert.Equal(t, uint64(16<<10), c.llMax) }},
		{EnvLLMax, "0", true, func(t *testing.T, c config) { assert.Equal(t, uint64(0), c.llMax) }},
		{EnvLLMax, "4096", true, func(t *testing.T, c config) { assert.Equal(t, uint64(4096), c.llMax) }},
		{EnvLLMax, "small", false, nil},
		{EnvLLMax, "-1", false, nil},
		{EnvGrid, "32", true, func(t *testing.T, c config) { assert.Equal(t, 32, c.maxGrid) }},
		{EnvGrid, "256", true, func(t *testing.T, c config) { assert.Equal(t, 256, c.maxGrid) }},
		{EnvGrid, "0", false, nil},
		{EnvGrid, "257", false, nil},
		{EnvGrid, "many", false, nil},
		{EnvMinGrid, "0", true, func(t *testing.T, c config) { assert.Equal(t, 0, c.minGrid) }},
		{EnvMinGrid, "48", true, func(t *testing.T, c config) { assert.Equal(t, 48, c.minGrid) }},
		{EnvMinGrid, "256", true, func(t *testing.T, c config) { assert.Equal(t, 256, c.minGrid) }},
		{EnvMinGrid, "257", false, nil},
		{EnvMinGrid, "-1", false, nil},
		{EnvMinGrid, "few", false, nil},
		{EnvTimeout, "5s", true, func(t *testing.T, c config) { assert.Equal(t, 5*time.Second, c.timeout) }},
		{EnvTimeout, "250ms", true, func(t *testing.T, c config) { assert.Equal(t, 250*time.Millisecond, c.timeout) }},
		{EnvTimeout, "5", true, func(t *testing.T, c config) { assert.Equal(t, 5*time.Second, c.timeout) }},
		{EnvTimeout, "2.5", true, func(t *testing.T, c config) { assert.Equal(t, 2500*time.Millisecond, c.timeout) }},
		{EnvTimeout, "0", false, nil},
		{EnvTimeout, "5 s", false, nil},
		{EnvTimeout, "0s", false, nil},
		{EnvTimeout, "-1s", false, nil},
	} {
		t.Run(tc.env+"="+tc.value, func(t *testing.T) {
			t.Setenv(tc.env, tc.value)
			c, err := resolve(nil)
			if tc.ok {
				require.NoError(t, err)
				tc.check(t, c)
				return
			}
			require.Error(t, err)
			var ee *team.EnvError
			require.ErrorAs(t, err, &ee)
			assert.Equal(t, tc.env, ee.Var)
			assert.Equal(t, tc.value, ee.Value)
			assert.ErrorIs(t, err, ErrBadEnv)
			assert.ErrorIs(t, err, team.ErrBadEnv)
			assert.Contains(t, err.Error(), "collectives: "+tc.env+"=")
			assert.Contains(t, err.Error(), "want "+ee.Accepts)
		})
	}
}

func TestOptionsWinOverEnv(t *testing.T) {
	t.Setenv(EnvOneShotMax, "1K")
	t.Setenv(EnvGrid, "7")
	t.Setenv(EnvTimeout, "1m")
	t.Setenv(EnvLLMax, "2K")
	t.Setenv(EnvMinGrid, "5")
	c, err := resolve([]Option{WithLLMax(0), WithOneShotMax(math.MaxUint64), WithMaxGrid(9), WithTimeout(time.Second), WithStageBytes(5000), WithMinGrid(3)})
	require.NoError(t, err)
	assert.Equal(t, 3, c.minGrid)
	assert.Equal(t, uint64(math.MaxUint64), c.oneShotMax)
	assert.Equal(t, uint64(0), c.llMax)
	assert.Equal(t, 9, c.maxGrid)
	assert.Equal(t, time.Second, c.timeout)
	assert.Equal(t, uint64(5120), c.stage, "rounded up to 256")
	c, err = resolve(nil)
	require.NoError(t, err)
	assert.Equal(t, uint64(1024), c.oneShotMax)
	assert.Equal(t, uint64(2048), c.llMax)
	assert.Equal(t, 7, c.maxGrid)
	assert.Equal(t, 5, c.minGrid)
	assert.Equal(t, time.Minute, c.timeout)
	_, err = resolve([]Option{WithMinGrid(-1)})
	assert.ErrorIs(t, err, ErrInvalid)
	_, err = resolve([]Option{WithMinGrid(257)})
	assert.ErrorContains(t, err, "WithMinGrid(257): want 0 to 256")
	// A bad variable is an error even where an option makes it moot.
	t.Setenv(EnvGrid, "x")
	_, err = resolve([]Option{WithMaxGrid(9)})
	assert.ErrorIs(t, err, ErrBadEnv)
}

// TestLaunchOption: NVLS_LAUNCH and WithLaunch pick where calls launch,
// the option over the variable; a bad value of either is an error; New
// takes it.
func TestLaunchOption(t *testing.T) {
	t.Setenv(EnvLaunch, "")
	c, err := resolve(nil)
	require.NoError(t, err)
	assert.Equal(t, LaunchAuto, c.launch)
	for v, want := range map[string]Launch{"caller": LaunchCaller, "Workers": LaunchWorkers, "auto": LaunchAuto} {
		t.Setenv(EnvLaunch, v)
		c, err := resolve(nil)
		require.NoError(t, err, v)
		assert.Equal(t, want, c.launch, v)
		c, err = resolve([]Option{WithLaunch(LaunchWorkers)})
		require.NoError(t, err)
		assert.Equal(t, LaunchWorkers, c.launch, "the option wins over %s=%s", EnvLaunch, v)
	}
	t.Setenv(EnvLaunch, "threads")
	_, err = resolve(nil)
	require.ErrorIs(t, err, ErrBadEnv)
	assert.ErrorContains(t, err, EnvLaunch)
	t.Setenv(EnvLaunch, "")
	_, err = resolve([]Option{WithLaunch(Launch(7))})
	require.ErrorIs(t, err, ErrInvalid)
	assert.ErrorContains(t, err, "WithLaunch(Launch(7))")
	assert.Equal(t, "caller", LaunchCaller.String())

	f := newFixture(t, fixtureConfig{ranks: 2, transport: team.Unicast, opts: []Option{WithLaunch(LaunchCaller)}})
	assert.Equal(t, LaunchCaller, f.c.via)
}

func TestDefaults(t *testing.T) {
	for _, v := range []string{EnvLLMax, EnvOneShotMax, EnvGrid, EnvMinGrid, EnvCopyEngineMin, EnvTimeout} {
		t.Setenv(v, "") // restored after the test
		require.NoError(t, os.Unsetenv(v))
	}
	c, err := resolve(nil)
	require.NoError(t, err)
	assert.Equal(t, uint64(DefaultOneShotMax), c.oneShotMax)
	assert.Equal(t, uint64(DefaultLLMax), c.llMax)
	assert.Equal(t, DefaultMaxGrid, c.maxGrid)
	assert.Equal(t, DefaultMinGrid, c.minGrid)
	assert.Equal(t, uint64(DefaultCopyEngineMin), c.ceMin)
	assert.Equal(t, uint64(DefaultLLTwoMax), c.llTwoMax)
	assert.Equal(t, uint64(DefaultLLTwoBcastMax), c.llTwoBcastMax)
	assert.Equal(t, DefaultTimeout, c.timeout)
	assert.Equal(t, uint64(DefaultStageBytes), c.stage)
	// The limits by team size: 2 ranks have their own; an option or the
	// environment wins over them.
	for n, want := range map[int][2]uint64{1: {DefaultLLMax, DefaultOneShotMax}, 2: {DefaultLLMax2, DefaultOneShotMax2},
		3: {DefaultLLMax, DefaultOneShotMax}, 8: {DefaultLLMax, DefaultOneShotMax}} {
		s := c.sized(n)
		assert.Equal(t, want, [2]uint64{s.llMax, s.oneShotMax}, "%d ranks", n)
	}
	for _, n := range []int{2, 3, 4, 8} {
		s := c.sized(n)
		assert.LessOrEqual(t, s.oneShotMax, s.llMax, "%d ranks: nothing above LL runs one-shot by default (docs/perf.md runs 82-83)", n)
	}
	for n, want := range map[int]uint64{1: DefaultCopyEngineMin, 2: DefaultCopyEngineMin, 3: DefaultCopyEngineMin3,
		4: DefaultCopyEngineMin3, 8: DefaultCopyEngineMin3} {
		assert.Equal(t, want, c.sized(n).ceMin, "%d ranks: the copy-engine limit", n)
	}
	// The reduce's pull: 8 MiB at 2 ranks, never elsewhere; with it on at
	// 2 ranks the reduce's copy engines start at 256 MiB, unless a limit
	// was given.
	for n, want := range map[int][2]uint64{1: {0, DefaultCopyEngineMin}, 2: {DefaultReducePullMin2, DefaultReduceCopyEngineMin2},
		3: {0, DefaultCopyEngineMin3}, 8: {0, DefaultCopyEngineMin3}} {
		s := c.sized(n)
		assert.Equal(t, want, [2]uint64{s.pullMin, s.reduceCEMin(n)}, "%d ranks: the pull and the reduce's copy-engine limits", n)
	}
	for _, tc := range []struct {
		name           string
		opts           []Option
		env            string
		n              int
		pull, reduceCE uint64
	}{
		{"a copy-engine limit given", []Option{WithCopyEngineMin(64 << 20)}, "", 2, DefaultReducePullMin2, 64 << 20},
		{"the pull off", []Option{WithReducePullMin(0)}, "", 2, 0, DefaultCopyEngineMin},
		{"the pull from 64 MiB", []Option{WithReducePullMin(64 << 20)}, "", 2, 64 << 20, DefaultReduceCopyEngineMin2},
		{"the pull at 4 ranks", []Option{WithReducePullMin(1 << 20)}, "", 4, 1 << 20, DefaultCopyEngineMin3},
		{"the environment", nil, "16M", 2, 16 << 20, DefaultReduceCopyEngineMin2},
		{"the option over the environment", []Option{WithReducePullMin(4 << 20)}, "0", 2, 4 << 20, DefaultReduceCopyEngineMin2},
		{"the environment at 3 ranks", nil, "2M", 3, 2 << 20, DefaultCopyEngineMin3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			t.Setenv(EnvReducePullMin, tc.env)
			r, err := resolve(tc.opts)
			require.NoError(t, err)
			r = r.sized(tc.n)
			assert.Equal(t, [2]uint64{tc.pull, tc.reduceCE}, [2]uint64{r.pullMin, r.reduceCEMin(tc.n)})
		})
	}
	t.Setenv(EnvReducePullMin, "8 mega")
	_, err = resolve(nil)
	var ee *team.EnvError
	require.ErrorAs(t, err, &ee, "a bad size")
	assert.Equal(t, EnvReducePullMin, ee.Var)
	t.Setenv(EnvReducePullMin, "")
	ce, err := resolve([]Option{WithCopyEngineMin(1 << 30)})
	require.NoError(t, err)
	assert.Equal(t, uint64(1<<30), ce.sized(4).ceMin, "the option wins over the 4-rank default")
	o, err := resolve([]Option{WithLLMax(4 << 10), WithOneShotMax(64 << 10)})
	require.NoError(t, err)
	o = o.sized(2)
	assert.Equal(t, [2]uint64{4 << 10, 64 << 10}, [2]uint64{o.llMax, o.oneShotMax}, "options win over the 2-rank defaults")
	t.Setenv(EnvLLMax, "8K")
	e, err := resolve(nil)
	require.NoError(t, err)
	assert.Equal(t, uint64(8<<10), e.sized(2).llMax, "the environment wins over the 2-rank default")
}

// TestNewFromEnv: New takes the variables, caps the grid by the team's SM
// count, and fails on a bad value naming the variable; the timeout reaches
// the kernels' params.
func TestNewFromEnv(t *testing.T) {
	f := newFixture(t, fixtureConfig{ranks: 2, transport: team.Unicast, dataBytes: 16 << 20})
	t.Setenv(EnvGrid, "200")
	t.Setenv(EnvOneShotMax, "8K")
	t.Setenv(EnvTimeout, "3s")
	t.Setenv(EnvLLMax, "4K")
	c, err := New(f.t)
	require.NoError(t, err)
	defer c.Close()
	assert.Equal(t, 132, c.MaxGrid(), "the simulated H200's SM count caps NVLS_GRID=200")
	assert.Equal(t, uint64(8<<10), c.OneShotMax())
	assert.Equal(t, uint64(3*time.Second), c.ranks[1].base.TimeoutNs)
	assert.Equal(t, uint64(4<<10), c.LLMax())
	assert.Equal(t, kernels.LL, c.algo(4<<10))
	assert.Equal(t, kernels.OneShot, c.algo(4<<10+1))
	assert.Equal(t, kernels.OneShot, c.algo(8<<10))
	assert.Equal(t, kernels.TwoShot, c.algo(8<<10+1))
	t.Setenv(EnvTimeout, "soon")
	_, err = New(f.t)
	assert.ErrorContains(t, err, "collectives: NVLS_TIMEOUT=\"soon\": want a duration more than zero")
}

// TestGrid: the grid grows with the work per rank, is at least 1 and at
// most the largest grid, and depends only on the size, the algorithm (or
// the number of slices) and the team size.
func TestGrid(t *testing.T) {
	c := &Comm{size: 4, maxGrid: 64, blockVecs: kabi.BlockThreads * vecsPerThread}
	per := uint64(kabi.BlockThreads * vecsPerThread * kabi.VecBytes)
	assert.Equal(t, uint64(1), c.grid(kernels.OneShot, 0))
	assert.Equal(t, uint64(1), c.grid(kernels.OneShot, 8))
	assert.Equal(t, uint64(1), c.grid(kernels.OneShot, per-16))
	assert.Equal(t, uint64(2), c.grid(kernels.OneShot, per))
	assert.Equal(t, uint64(1), c.grid(kernels.TwoShot, 4*per-64))
	assert.Equal(t, uint64(3), c.grid(kernels.TwoShot, 10*per))
	assert.Equal(t, uint64(64), c.grid(kernels.TwoShot, 1<<40))
	// The sliced broadcast's share is 1/3 on 4 ranks, not 1/4: 3 blocks'
	// worth of vectors need 2 blocks where two-shot needs 1.
	assert.Equal(t, uint64(1), c.shareGrid(3*per-48, 3))
	assert.Equal(t, uint64(2), c.shareGrid(3*per, 3))
	assert.Equal(t, uint64(1), c.grid(kernels.TwoShot, 3*per))
	assert.Equal(t, uint64(2), c.shareGrid(per, 1))
	c.maxGrid = 1
	assert.Equal(t, uint64(1), c.grid(kernels.OneShot, 1<<40))
}

// TestMinGrid: below the min grid a launch takes one vector a thread, a
// block per BlockThreads vectors; above it the grid is what 4 a thread
// give, never less than the min grid's and never more than the max grid.
func TestMinGrid(t *testing.T) {
	c := &Comm{size: 4, maxGrid: 132, minGrid: 16, blockVecs: kabi.BlockThreads * vecsPerThread}
	bt := uint64(kabi.BlockThreads)
	for _, tc := range []struct{ vecs, want uint64 }{
		{0, 1}, {1, 1}, {bt, 1}, {bt + 1, 2},
		{8192, 16},                    // a 512 KiB two-shot all-reduce on 4 ranks: 4 blocks without it
		{16 * bt, 16},                 // the min grid reached at one vector a thread
		{16 * bt * vecsPerThread, 16}, // and kept until 4 a thread need more
		{16*bt*vecsPerThread + 1, 17},
		{1 << 30, 132},
	} {
		assert.Equal(t, tc.want, c.blocksFor(tc.vecs), "%d vectors", tc.vecs)
	}
	c.minGrid = 0
	assert.Equal(t, uint64(4), c.blocksFor(8192), "min grid 0: 4 vectors a thread from the first block")
	c.minGrid, c.maxGrid = 64, 8
	assert.Equal(t, uint64(8), c.blocksFor(8192), "the max grid caps the min grid")
	// The grid of a 512 KiB two-shot on 4 ranks, through grid.
	c.minGrid, c.maxGrid = 16, 132
	assert.Equal(t, uint64(16), c.grid(kernels.TwoShot, 512<<10))
	// LL launches keep blocks as large as their lines fill (run 45), up
	// to 256 threads (run 61): 8 KiB is 1,024 lines.
	g, b := c.llShape(8 << 10)
	assert.Equal(t, [2]uint64{4, 256}, [2]uint64{g, uint64(b)})
	g, b = c.llShape(1 << 10)
	assert.Equal(t, [2]uint64{1, 128}, [2]uint64{g, uint64(b)})
	// Past maxGrid blocks of 256 threads, larger blocks hold one line a
	// thread (run 70): 512 KiB is 65,536 lines, 384 KiB 49,152.
	for _, tc := range []struct {
		bytes, maxGrid, grid, block uint64
	}{
		{256 << 10, 132, 128, 256},
		{384 << 10, 132, 128, 384},
		{512 << 10, 132, 128, 512},
		{1 << 20, 132, 132, 512}, // 512 threads a block at most: they loop
		{64 << 10, 8, 8, 512},
		{16 << 10, 8, 8, 256},
	} {
		c.maxGrid = tc.maxGrid
		g, b := c.llShape(tc.bytes)
		assert.Equal(t, [2]uint64{tc.grid, tc.block}, [2]uint64{g, uint64(b)}, "%d bytes, max grid %d", tc.bytes, tc.maxGrid)
	}
}
