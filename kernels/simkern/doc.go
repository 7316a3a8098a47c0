// Package simkern holds the Go reference implementations of every kernel
// entry point of kernels/*.cu, for the simulated node of package cuda/sim.
// Kernels returns them by the entry names of package kernels, for
// sim.Config.Kernels; package simnode makes a node that carries them.
//
// Both flavors share their names, as on a GPU where the unicast and the
// multicast PTX declare the same entry points: an implementation picks the
// flavor from the params (MC != 0 means the multicast flavor).
//
// The implementations mirror the CUDA structure: the same params, the same
// per-block barrier protocol through sim.Memory (a release add of 1 to
// slot [phase][block] of every rank, through the multicast alias or each
// peer's unicast alias; an acquire poll of the own counter until the own
// epoch + nranks, wrap-safe; the epoch kept in the own workspace; the
// deadline from %globaltimer at entry and the status word written on
// expiry; the team-failed word set on every rank on expiry, checked at
// entry and while waiting: failure.go), the same grid-stride split of 16-byte vectors over blocks, the
// same slices for two-shot, and the same scalar tail through the unicast
// leaves. Blocks run one after the other in block order: block b of a rank
// only ever waits for block b of the others, and every rank runs its
// blocks in the same order, so this cannot deadlock.
//
// Where the hardware does 16-byte accesses per thread, the unicast leaves
// here move the vectors of one block iteration (blockDim consecutive
// vectors) with one Load or Store per rank: the same bytes in the same
// order of ranks, fewer simulator calls; the multimem leaves likewise use
// the simulator's span accesses (sim.MultimemLoadSpan / MultimemStoreSpan),
// each the loop of 16-byte accesses (4 or 8 bytes for integers, as in
// nvls.h) over the chunk.
//
// 16-bit floats are reduced in f32 in rank order (multicast: in the order
// the simulator returns the bound allocations, the order devices were
// added) and rounded once to nearest even; so the unicast flavor gives
// every rank bit-identical results, as on the GPU. min and max are PTX's
// min_num/max_num (a NaN operand yields the other, -0 < +0); the ISA does
// not say what multimem.ld_reduce does with NaN or signed zeros, and the
// multicast leaves here assume the same rules.
package simkern
