package collectives

import (
	"time"

	"github.com/nvls-go/nvls/kernels"
)

// Settings are the limits and sizes a Comm runs with: its options, then
// the environment, then the defaults for its team's size, as New
// resolved them and the ranks agreed. A limit of 0 means never. Each
// field's option (WithLLMax and so on) says where the limit applies.
type Settings struct {
	// LLMax is the largest all-reduce that runs LL (0 also where the
	// loaded PTX has no LL kernels).
	LLMax uint64 `json:"ll_max"`
	// LLTwoMax and LLTwoBcastMax are the largest reduce and broadcast
	// that run two LL steps above LLMax (0 on the multicast transport,
	// and the broadcast's below 3 ranks).
	LLTwoMax      uint64 `json:"ll_two_max"`
	LLTwoBcastMax uint64 `json:"ll_two_bcast_max"`
	// OneShotMax is the largest all-reduce that runs one-shot.
	OneShotMax uint64 `json:"oneshot_max"`
	// CopyEngineMin is the copy engines' limit (0: not used, as with
	// the multicast transport or ranks that share a device), and
	// ReduceCopyEngineMin the 2-rank reduce's (0 in other teams).
	CopyEngineMin       uint64 `json:"copy_engine_min"`
	ReduceCopyEngineMin uint64 `json:"reduce_copy_engine_min"`
	// ReducePullMin is the smallest reduce the root pulls alone
	// (one-shot; 0: never, and 0 on the multicast transport, where every
	// reduce is one-shot).
	ReducePullMin uint64 `json:"reduce_pull_min"`
	// RingMin is the smallest reduce that runs as a ring and RingBytes
	// its FIFO a rank (both 0: the ring is off).
	RingMin   uint64 `json:"ring_min"`
	RingBytes uint64 `json:"ring_bytes"`
	// StageBytes is each of the two staging areas.
	StageBytes uint64 `json:"stage_bytes"`
	// MaxGrid and MinGrid bound a launch's blocks.
	MaxGrid int `json:"max_grid"`
	MinGrid int `json:"min_grid"`
	// Timeout is the kernels' wait limit.
	Timeout time.Duration `json:"timeout_ns"`
	// PDL is how the kernels launch (programmatic dependent launch: a
	// PDL's String).
	PDL string `json:"pdl"`
}

// Settings reports what c runs with.
func (c *Comm) Settings() Settings {
	s := Settings{
		LLMax: c.llMax, LLTwoMax: c.cfg.llTwoMax, LLTwoBcastMax: c.cfg.llTwoBcastMax,
		OneShotMax: c.cfg.oneShotMax, StageBytes: c.stageBytes,
		MaxGrid: int(c.maxGrid), MinGrid: int(c.minGrid), Timeout: c.cfg.timeout, PDL: c.pdl.String(),
	}
	if c.flavor != kernels.Unicast || c.llMax == 0 {
		s.LLTwoMax, s.LLTwoBcastMax = 0, 0
	}
	if c.size < 3 {
		s.LLTwoBcastMax = 0
	}
	if c.usesCE() {
		s.CopyEngineMin = c.cfg.ceMin
		if c.size == 2 {
			s.ReduceCopyEngineMin = c.cfg.reduceCEMin(c.size)
		}
	}
	if c.flavor == kernels.Unicast {
		s.ReducePullMin = c.cfg.pullMin
	}
	if c.ringHeld {
		s.RingMin, s.RingBytes = c.cfg.ringMin, c.ringBytes
	}
	return s
}
