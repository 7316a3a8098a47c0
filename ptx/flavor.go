package ptx

import "fmt"

// Flavor says which leaves a PTX image was compiled with (kernels/nvls.h,
// NVLS_MULTICAST): multimem instructions on the multicast alias, or loops
// over the peers' unicast aliases.
type Flavor uint8

// The two flavors.
const (
	// Unicast: -DNVLS_MULTICAST=0; runs on any NVLink node with peer access.
	Unicast Flavor = iota
	// Multicast: -DNVLS_MULTICAST=1; needs sm_90 and a multicast object
	// bound to every rank's workspace.
	Multicast
)

// Flavors lists both flavors, unicast first.
var Flavors = []Flavor{Unicast, Multicast}

func (f Flavor) String() string {
	switch f {
	case Unicast:
		return "unicast"
	case Multicast:
		return "multicast"
	}
	return fmt.Sprintf("Flavor(%d)", uint8(f))
}

// Suffix is the flavor's file name suffix: "uc" or "mc" (ptx/<name>_<suffix>.ptx).
func (f Flavor) Suffix() string {
	switch f {
	case Unicast:
		return "uc"
	case Multicast:
		return "mc"
	}
	return ""
}

// Valid reports whether f is one of the two flavors.
func (f Flavor) Valid() bool { return f == Unicast || f == Multicast }
