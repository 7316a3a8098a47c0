//go:build !windows

package posixfd

import "syscall"

// Close closes fd.
func Close(fd int) error { return syscall.Close(fd) }

// DupCloexec duplicates fd, close-on-exec.
func DupCloexec(fd int) (int, error) {
	r, _, errno := syscall.Syscall(syscall.SYS_FCNTL, uintptr(fd), syscall.F_DUPFD_CLOEXEC, 0)
	if errno != 0 {
		return -1, errno
	}
	return int(r), nil
}
