// Package simdiff judges the simulated node (cuda/sim) by the real driver:
// it draws random sequences of the virtual memory, memory, stream, event
// and module calls the project makes (never a cuMulticast* call), runs
// each call on two cuda.Drivers in lockstep (the simulator and the real
// driver of one GPU, wrapped in internal/unicastonly), and compares the
// result codes call by call and the contents of device memory after the
// calls that write it. Every difference is reported with the call, both
// results and the calls before it.
//
// The sequences are valid programs with probes: arguments the driver
// documents as errors (misaligned sizes, unmapped addresses, a range that
// is not a whole mapping, ...), and the cases whose outcome the
// documentation leaves open but that are safe to ask (cuMemAddressFree of
// a range still mapped). Nothing whose behaviour the driver leaves
// undefined is drawn (released handles, destroyed streams, overlapping
// copies, work racing on the same memory): see ops.go and streams.go.
//
// Run it on a GPU with the gpu-tagged test of this package; docs/sim.md
// gives the command. Without a GPU, the tests run the machinery with the
// simulator on both sides, and with planted differences.
package simdiff
