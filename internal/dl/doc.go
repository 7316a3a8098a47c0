// Package dl is the dynamic loader of the bindings (cuda: libcuda.so.1,
// nccl: libnccl.so.2), through purego, so that nothing needs cgo.
//
// It loads on Linux only, the one system the bindings are for: NVIDIA
// ships no CUDA 11.3+ driver (nor NCCL) for macOS, and on Windows the
// libraries are DLLs of another ABI that purego does not dlopen. Elsewhere
// Open returns an error saying so, which the bindings wrap in their "no
// driver" / "no NCCL" errors, so that programs fall back to the simulator
// as on a Linux machine without a driver.
package dl
