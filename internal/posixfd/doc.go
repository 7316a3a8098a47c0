// Package posixfd closes and duplicates the POSIX file descriptors that
// CUDA exports for shareable handles (cuda.ShareableHandle.FD), on every
// system the module builds for. Windows has none (its driver exports
// Win32 handles, and the simulator there has no POSIX FD handles), so
// there every call fails with an error matching errors.ErrUnsupported.
package posixfd
