// Package kernels is the device side of nvls: the CUDA sources of the
// collective kernels (allreduce.cu, reducescatter.cu, allgather.cu,
// reduce.cu, broadcast.cu, barrier.cu and nvls.h, in this directory), their ABI as Go sees it (the workspace layout and
// opcodes of abi.go, the Params struct every kernel takes), the one
// vocabulary of element types and operators every layer uses (dtype.go,
// elem.go; host.go: the types as Go holds them, Float16, BFloat16 and the
// Elem constraint of team.CopyIn), the kernel table from which the entry point names follow, the
// table of supported element type and operator pairs, and Load, which
// loads the committed PTX (package ptx) for a flavor and resolves every
// entry point.
//
// Each source compiles to two flavors that differ only in the leaf
// operations of nvls.h: multicast (multimem.ld_reduce / multimem.st /
// multimem.red on the multicast alias) and unicast (loops over the peers'
// unicast aliases in rank order). The Go reference implementations of
// every entry point, used by the simulated node, are in kernels/simkern
// (package collectives imports it; import it, blank, to Load on the
// simulated node without collectives).
package kernels
