// Package kernels is the device side of nvls: the CUDA sources of the
// collective kernels (allreduce.cu, reducescatter.cu, allgather.cu,
// reduce.cu, broadcast.cu, barrier.cu and nvls.h, in this directory) and
// what a user of nvls, or a reader of its PTX, names of them:
//
//   - the one vocabulary of element types and operators every layer uses
//     (dtype.go, elem.go; host.go: the types as Go holds them, Float16,
//     BFloat16, the Type and Elem constraints of collectives.Buffer and
//     team.CopyIn);
//   - the kernel table (desc.go): one row per collective, from which the
//     entry point names (names.go), the PTX files and the opcodes that
//     name a collective in its errors follow; and the table of element
//     type and operator pairs each flavor supports;
//   - Args, the arguments of a call as the kernels' argument check saw
//     them (collectives.MismatchError).
//
// Each source compiles to two flavors that differ only in the leaf
// operations of nvls.h: multicast (multimem.ld_reduce / multimem.st /
// multimem.red on the multicast alias) and unicast (loops over the peers'
// unicast aliases in rank order). The committed PTX is package ptx.
//
// The kernel ABI as Go sees it (the parameter struct, the signal area's
// layout, the status and argument words, loading the PTX) is internal to
// this module (internal/kabi); kernels/README.md documents it. The Go
// reference implementations of every entry point, used by the simulated
// node, are in kernels/simkern (package simnode makes a node with them).
package kernels
