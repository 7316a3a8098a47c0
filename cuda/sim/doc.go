// Package sim is a simulated NVSwitch node behind the cuda.Driver
// interface, so that every layer above package cuda runs in CI, where
// there is no GPU.
//
// New(Config) returns a Node with N devices (default 4, "Simulated H200",
// 132 SMs, 1 GiB each, multicast and POSIX FD handles supported (no POSIX
// FDs on Windows), every pair of devices peer-capable); each Config field
// can be varied by tests.
//
// It models primary contexts current per OS thread, the virtual address
// space (reservations, physical allocations, mappings, access rights),
// multicast objects with the driver's ordering rules, streams, events,
// stream capture and graphs (a replay runs the captured streams' ops
// concurrently, in the order the capture's forks and joins set, as a GPU
// runs a graph), and modules whose kernels are Go reference
// implementations given in Config.Kernels (a node with nvls's own comes
// from package simnode). It fails the way the
// driver fails, with the driver's error codes, as judged by the real
// driver in internal/simdiff.
//
// For tests: fault injection (FailAt, FailNth), a call log (Calls), leak
// tracking (Live, CheckNoLeaks), and oracles that bypass access rights
// (ReadDevice, WriteDevice, Memory).
//
// Where it deliberately differs from the driver: times are wall-clock
// times of Go code, memory ordering is sequentially consistent, a bind or
// mapping of a multicast object waits for its last device at most
// Config.MulticastWait (then CUDA_ERROR_TIMEOUT), overlapping binds and
// unbinds that match no bind are refused, access rights are per mapping,
// and it ignores NCCL_NVLS_ENABLE. The full list, and how an entry point
// is written: docs/sim.md.
package sim
