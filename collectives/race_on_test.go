//go:build race

package collectives

// raceEnabled: the race detector is on; it allocates in code that
// otherwise allocates nothing, so allocation counts are not asserted.
const raceEnabled = true
