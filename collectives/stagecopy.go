package collectives

import (
	"fmt"

	"github.com/nvls-go/nvls/cuda"
)

// errStageOverrun is a plan that would copy past the staging areas: a bug
// of this package, never the caller's, so it is reported instead of
// writing over whatever follows them in the workspace.
var errStageOverrun = fmt.Errorf("collectives: internal error: a staged copy runs past the staging areas")

// inStage reports whether the n bytes at p lie inside the rank's two
// staging areas (A, then B).
func (c *Comm) inStage(rs *rankState, p cuda.DevicePtr, n uint64) bool {
	lo := rs.own + c.stageA
	return uint64(p) >= lo && uint64(p)+n <= lo+2*c.stageBytes
}

// copyIn copies n bytes from the caller's src into the staging areas at
// dst, on the rank's stream.
func (c *Comm) copyIn(rs *part, dst, src cuda.DevicePtr, n uint64) error {
	if !c.inStage(rs.rankState, dst, n) {
		return fmt.Errorf("%w: copying %d bytes in at %#x, the areas being [%#x, +%d)", errStageOverrun, n, dst, rs.own+c.stageA, 2*c.stageBytes)
	}
	if err := c.d.MemcpyDtoDAsync(dst, src, n, rs.stream); err != nil {
		return fmt.Errorf("copying send in: %w", err)
	}
	return nil
}

// copyOut copies n bytes from the staging areas at src to the caller's
// dst, on the rank's stream.
func (c *Comm) copyOut(rs *part, dst, src cuda.DevicePtr, n uint64) error {
	if !c.inStage(rs.rankState, src, n) {
		return fmt.Errorf("%w: copying %d bytes out from %#x, the areas being [%#x, +%d)", errStageOverrun, n, src, rs.own+c.stageA, 2*c.stageBytes)
	}
	if err := c.d.MemcpyDtoDAsync(dst, src, n, rs.stream); err != nil {
		return fmt.Errorf("copying recv out: %w", err)
	}
	return nil
}
