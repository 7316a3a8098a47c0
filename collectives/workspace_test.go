package collectives

import (
	"context"
	"os"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/nvls-go/nvls/cuda"
	"github.com/nvls-go/nvls/cuda/sim"
	"github.com/nvls-go/nvls/internal/kabi"
	"github.com/nvls-go/nvls/kernels"
	"github.com/nvls-go/nvls/team"
)

// TestWorkspaceBytes: the figure against the areas' sizes worked out by
// hand, the environment read as New reads it, and a team whose data area
// is the user's buffers plus WorkspaceBytes takes New (and buffers past
// it do not fit).
func TestWorkspaceBytes(t *testing.T) {
	for _, v := range []string{EnvLLMax, EnvLLTwoBcastMax} {
		t.Setenv(v, "") // restored after the test
		require.NoError(t, os.Unsetenv(v))
	}
	for _, tc := range []struct {
		ranks int
		opts  []Option
		want  uint64
	}{
		// Two staging areas of 2 MiB; LL: 128 KiB of payload is 16384
		// lines of 16 bytes, twice (two halves), per rank; 2 ranks: 512
		// KiB (DefaultLLMax2), 65536 lines. From 3 ranks the two-step
		// broadcast's 1 MiB (131072 lines) takes a slice of ceil(131072
		// / (n - 1)) and a line a slot where that is more.
		{2, nil, 2*2<<20 + 2*2*65536*16},
		{4, nil, 2*2<<20 + 2*4*43692*16},
		{8, nil, 2*2<<20 + 2*8*18726*16},
		{8, []Option{WithLLTwoBcastMax(0)}, 2*2<<20 + 2*8*16384*16},
		{2, []Option{WithLLMax(DefaultLLMax)}, 2*2<<20 + 2*2*16384*16},
		{4, []Option{WithLLMax(0)}, 2 * 2 << 20},
		// Staging 5000 -> 5120 bytes each; LL: 100 bytes are 13 lines,
		// 2 x 3 x 13 x 16 = 1248 bytes, rounded to 1280; 1000 bytes in
		// two steps are 125 lines, 63 a slice and a line, 6144 bytes.
		{3, []Option{WithLLMax(100), WithLLTwoBcastMax(0), WithStageBytes(5000)}, 2*5120 + 1280},
		{3, []Option{WithLLMax(100), WithLLTwoBcastMax(1000), WithStageBytes(5000)}, 2*5120 + 6144},
		// The ring's FIFO where the ring is on, from 2 ranks.
		{4, []Option{WithLLMax(0), WithRingMin(1)}, 2*2<<20 + DefaultRingBytes},
		{3, []Option{WithLLMax(0), WithRingMin(1), WithRingBytes(3 << 20)}, 2*2<<20 + 3<<20},
		{2, []Option{WithLLMax(0), WithRingMin(1)}, 2*2<<20 + DefaultRingBytes},
		{1, []Option{WithLLMax(0), WithRingMin(1)}, 2 * 2 << 20},
		{4, []Option{WithLLMax(0), WithRingBytes(3 << 20)}, 2 * 2 << 20},
	} {
		got, err := WorkspaceBytes(tc.ranks, tc.opts...)
		require.NoError(t, err)
		assert.Equal(t, tc.want, got, "%d ranks", tc.ranks)
	}
	t.Setenv(EnvLLMax, "16K")
	got, err := WorkspaceBytes(2)
	require.NoError(t, err)
	assert.Equal(t, uint64(2*2<<20+2*2*2048*16), got)
	t.Setenv(EnvLLMax, "lots")
	_, err = WorkspaceBytes(2)
	assert.ErrorIs(t, err, ErrBadEnv)
	_, err = WorkspaceBytes(0)
	assert.ErrorIs(t, err, ErrInvalid)
	require.NoError(t, os.Unsetenv(EnvLLMax))

	const ranks, buf = 2, 1 << 20
	need, err := WorkspaceBytes(ranks)
	require.NoError(t, err)
	node := newSimNode(sim.Config{Devices: ranks})
	tm, err := team.New(context.Background(), node, []cuda.Device{0, 1},
		team.WithTransport(team.Unicast), team.WithWorkspaceSize(2*buf+need), team.WithLogger(quietLogger()))
	require.NoError(t, err)
	defer func() { require.NoError(t, tm.Close()) }()
	a, err := tm.Alloc(buf)
	require.NoError(t, err)
	b, err := tm.Alloc(buf)
	require.NoError(t, err)
	c, err := New(tm)
	require.NoError(t, err, "buffers + WorkspaceBytes must take New")
	assert.Equal(t, uint64(DefaultLLMax2), c.LLMax(), "2 ranks: the 2-rank LL limit")
	assert.Equal(t, uint64(DefaultOneShotMax2), c.OneShotMax(), "2 ranks: the 2-rank one-shot limit")
	assert.Equal(t, kernels.LL, c.algo(c.LLMax()), "2 ranks: LL up to its limit")
	assert.Equal(t, kernels.TwoShot, c.algo(c.LLMax()+kabi.VecBytes), "2 ranks: two-shot right above LL (docs/perf.md run 82)")
	require.NoError(t, c.Close())
	require.NoError(t, tm.Free(a))
	require.NoError(t, tm.Free(b))
}
