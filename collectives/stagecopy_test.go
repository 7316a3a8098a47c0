package collectives

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/nvls-go/nvls/cuda"
	"github.com/nvls-go/nvls/team"
)

// TestStageCopyBounds: a staged copy that would run past the two staging
// areas (a planning bug: the planted reduce-scatter copy-in of issue 24
// wrote 4.6 KB past them and every correctness test still passed) is an
// error, and nothing is copied; a copy that fits, up to the last byte of
// B, goes through.
func TestStageCopyBounds(t *testing.T) {
	f := newFixture(t, fixtureConfig{ranks: 2, transport: team.Unicast, dataBytes: 1 << 20, foreign: 64 << 10,
		opts: []Option{WithLLMax(0), WithStageBytes(4096)}})
	rs := &part{rankState: f.c.ranks[0]} // on the default stream
	a := cuda.DevicePtr(rs.own + f.c.stageA)
	src := f.foreign[0]
	end := a + cuda.DevicePtr(2*f.c.stageBytes)
	for _, tc := range []struct {
		name    string
		at      cuda.DevicePtr
		n       uint64
		overrun bool
	}{
		{"all of A and B", a, 2 * f.c.stageBytes, false},
		{"the last byte of B", end - 1, 1, false},
		{"one byte past B", end - 16, 17, true},
		{"from past B", end, 16, true},
		{"before A", a - 16, 16, true},
	} {
		f.node.ResetCalls()
		var err, errOut error
		require.NoError(t, f.t.Run(team.JobFunc(func(l int) error { // rank 0's context current
			if l == 0 {
				err = f.c.copyIn(rs, tc.at, src, tc.n)
				errOut = f.c.copyOut(rs, src, tc.at, tc.n)
			}
			return nil
		})))
		if tc.overrun {
			assert.ErrorIs(t, err, errStageOverrun, "%s: in", tc.name)
			assert.ErrorIs(t, errOut, errStageOverrun, "%s: out", tc.name)
			assert.Empty(t, f.node.CallsOf("cuMemcpyDtoDAsync"), "%s: copied", tc.name)
			continue
		}
		require.NoError(t, err, tc.name)
		require.NoError(t, errOut, tc.name)
		assert.Len(t, f.node.CallsOf("cuMemcpyDtoDAsync"), 2, tc.name)
	}
}
