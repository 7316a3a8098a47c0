package collectives

// The simulated node (package cuda/sim) runs a kernel by the Go function
// registered under its entry name; package simkern registers nvls's when
// it is imported. It is imported here, in the package that loads the
// kernels, so that a program runs on the simulated node with nothing but
// the packages it uses on a GPU (and cuda/sim, to make the node). No lower
// package can: simkern imports cuda/sim and kernels. On a GPU the
// registrations are never consulted.
import _ "github.com/nvls-go/nvls/kernels/simkern"
