package main

import (
	"errors"

	"github.com/nvls-go/nvls/team"
)

// errNoCollectives: package collectives is not in this tree yet, so the
// library's own collectives cannot run (the harness is tested with a
// reference double until then).
var errNoCollectives = errors.New("package collectives is not wired into nvls-bench yet (bench/collectives.go): nvls's collectives cannot run")

// newLibraryCollectives wires package collectives into the sweep.
func newLibraryCollectives(tm *team.Team, n *node, cfg *config) (collectiveLauncher, error) {
	return nil, errNoCollectives
}
