package collectives

import (
	"testing"
	"time"

	"github.com/stretchr/testify/assert"

	"github.com/nvls-go/nvls/team"
)

// TestSettings: Comm.Settings reports the limits in effect: the options
// given, the defaults for the team's size, and 0 for what the transport
// or team turns off (the copy engines and the ring on multicast).
func TestSettings(t *testing.T) {
	opts := []Option{WithOneShotMax(1 << 20), WithTimeout(3 * time.Second), WithRingMin(1 << 20), WithRingBytes(2 << 20), WithMaxGrid(16)}
	for _, tc := range []struct {
		name        string
		ranks       int
		tr          team.Transport
		ce, ringMin uint64
		ringBytes   uint64
		llTwoBcast  bool
		// the reduce's copy-engine and pull limits
		reduceCE, pull uint64
	}{
		{"4 ranks, unicast", 4, team.Unicast, DefaultCopyEngineMin3, 1 << 20, 2 << 20, true, 0, 0},
		{"2 ranks, unicast", 2, team.Unicast, DefaultCopyEngineMin, 1 << 20, 2 << 20, false, DefaultReduceCopyEngineMin2, DefaultReducePullMin2},
		{"4 ranks, multicast", 4, team.Multicast, 0, 0, 0, false, 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			f := newFixture(t, fixtureConfig{ranks: tc.ranks, transport: tc.tr, opts: opts})
			s := f.c.Settings()
			assert.Equal(t, uint64(1<<20), s.OneShotMax)
			assert.Equal(t, 3*time.Second, s.Timeout)
			assert.Equal(t, 16, s.MaxGrid)
			assert.Equal(t, tc.ce, s.CopyEngineMin)
			assert.Equal(t, tc.reduceCE, s.ReduceCopyEngineMin)
			assert.Equal(t, tc.pull, s.ReducePullMin)
			assert.Equal(t, tc.ringMin, s.RingMin)
			assert.Equal(t, tc.ringBytes, s.RingBytes)
			assert.Equal(t, f.c.LLMax(), s.LLMax)
			assert.Equal(t, f.c.StageBytes(), s.StageBytes)
			assert.Equal(t, f.c.pdl.String(), s.PDL)
			if tc.llTwoBcast {
				assert.Equal(t, f.c.cfg.llTwoBcastMax, s.LLTwoBcastMax)
				assert.NotZero(t, s.LLTwoBcastMax)
			} else {
				assert.Zero(t, s.LLTwoBcastMax)
			}
			if tc.tr == team.Multicast {
				assert.Zero(t, s.LLTwoMax)
			}
		})
	}
}
