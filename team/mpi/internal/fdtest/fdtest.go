//go:build linux

package fdtest

import (
	"fmt"
	"runtime"
	"syscall"
	"unsafe"
)

// memfd_create's system call number by architecture (the syscall package
// does not name it everywhere).
var sysMemfdCreate = map[string]uintptr{"amd64": 319, "arm64": 279, "ppc64le": 360, "riscv64": 279, "s390x": 350, "loong64": 279}

const mfdCloexec = 0x1

// Memfd creates an anonymous in-memory file holding data and returns its
// descriptor (close-on-exec), which the caller closes.
func Memfd(name string, data []byte) (int, error) {
	nr, ok := sysMemfdCreate[runtime.GOARCH]
	if !ok {
		return -1, fmt.Errorf("fdtest: memfd_create: unknown on %s", runtime.GOARCH)
	}
	p, err := syscall.BytePtrFromString(name)
	if err != nil {
		return -1, err
	}
	r, _, errno := syscall.Syscall(nr, uintptr(unsafe.Pointer(p)), mfdCloexec, 0)
	if errno != 0 {
		return -1, fmt.Errorf("fdtest: memfd_create: %w", errno)
	}
	fd := int(r)
	if _, err := syscall.Pwrite(fd, data, 0); err != nil {
		syscall.Close(fd)
		return -1, fmt.Errorf("fdtest: write memfd: %w", err)
	}
	return fd, nil
}

// ReadAll reads a file's whole content through fd, from offset 0 (pread:
// the shared file offset is left alone).
func ReadAll(fd int) ([]byte, error) {
	var st syscall.Stat_t
	if err := syscall.Fstat(fd, &st); err != nil {
		return nil, fmt.Errorf("fdtest: fstat %d: %w", fd, err)
	}
	buf := make([]byte, st.Size)
	n, err := syscall.Pread(fd, buf, 0)
	if err != nil {
		return nil, fmt.Errorf("fdtest: pread %d: %w", fd, err)
	}
	return buf[:n], nil
}

// Identity is the (device, inode) pair of the file behind fd.
func Identity(fd int) (dev, ino uint64, err error) {
	var st syscall.Stat_t
	if err := syscall.Fstat(fd, &st); err != nil {
		return 0, 0, fmt.Errorf("fdtest: fstat %d: %w", fd, err)
	}
	return uint64(st.Dev), st.Ino, nil
}

// IsOpen reports whether fd is an open descriptor of this process.
func IsOpen(fd int) bool {
	var st syscall.Stat_t
	return syscall.Fstat(fd, &st) == nil
}

// OpenFDs counts this process's open descriptors (entries of
// /proc/self/fd, less the one used to read it).
func OpenFDs() (int, error) {
	fd, err := syscall.Open("/proc/self/fd", syscall.O_RDONLY|syscall.O_DIRECTORY|syscall.O_CLOEXEC, 0)
	if err != nil {
		return 0, fmt.Errorf("fdtest: %w", err)
	}
	defer syscall.Close(fd)
	n := 0
	buf := make([]byte, 8192)
	for {
		m, err := syscall.ReadDirent(fd, buf)
		if err != nil {
			return 0, fmt.Errorf("fdtest: %w", err)
		}
		if m == 0 {
			break
		}
		_, cnt, _ := syscall.ParseDirent(buf[:m], -1, nil)
		n += cnt
	}
	return n - 1, nil
}
