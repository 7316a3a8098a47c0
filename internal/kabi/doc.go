// Package kabi is the kernel ABI as this module's Go sees it: the twin of
// kernels/nvls.h (abi_test.go checks every constant and struct
// nvls_params against the header). It holds what the host side and the
// simulator's kernels share and no user of nvls needs:
//
//   - Params, the one by-value parameter of every kernel, with Marshal
//     and UnmarshalParams (the simulator's reference kernels decode a
//     launch with them), and the launch shape (BlockThreads, VecBytes);
//   - the signal area at the start of every workspace (its offsets,
//     abi.go) and Layout, the workspace's one owner of offsets;
//   - the status word (Status, TimeoutStatus, AbortStatus, ...) and the
//     argument check's words (CheckArgs, CallWord, LLCheck, DecodeWord);
//   - Load, which loads the committed PTX (package ptx) of a flavor and
//     resolves every entry point of the kernel table (package kernels).
//
// The vocabulary (element types, operators, opcodes, entry names) is
// package kernels'; kernels/README.md is the contract in prose.
package kabi
