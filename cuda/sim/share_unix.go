//go:build !windows

package sim

import (
	"os"
	"strconv"
	"syscall"
)

// posixFDs: POSIX FD handles exist here (see share_windows.go).
const posixFDs = true

// createExportFile creates the file behind an exported FD at path, and
// unlinks it: the FD is all that is left of it.
func createExportFile(path string) (int, error) {
	fd, err := syscall.Open(path, syscall.O_RDWR|syscall.O_CREAT|syscall.O_EXCL|syscall.O_CLOEXEC, 0o600)
	if err != nil {
		return -1, err
	}
	_ = syscall.Unlink(path)
	return fd, nil
}

// fdKey is the (device, inode) of the file open at fd.
func fdKey(fd int) ([2]uint64, error) {
	var st syscall.Stat_t
	if err := syscall.Fstat(fd, &st); err != nil {
		return [2]uint64{}, err
	}
	return [2]uint64{uint64(st.Dev), uint64(st.Ino)}, nil
}

// fdDirs list the process's open FDs: Linux's /proc/self/fd, or /dev/fd
// (macOS; a link to the former on Linux).
var fdDirs = []string{"/proc/self/fd", "/dev/fd"}

// openFDKeys returns the (device, inode) of every open FD of the process,
// or nil where it cannot tell.
func openFDKeys() map[[2]uint64]bool {
	for _, dir := range fdDirs {
		if keys := fdKeysIn(dir); keys != nil {
			return keys
		}
	}
	return nil
}

// fdKeysIn returns the keys of the FDs that dir lists, nil if it cannot
// be read.
func fdKeysIn(dir string) map[[2]uint64]bool {
	ents, err := os.ReadDir(dir)
	if err != nil {
		return nil
	}
	out := map[[2]uint64]bool{}
	for _, e := range ents {
		fd, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if k, err := fdKey(fd); err == nil {
			out[k] = true
		}
	}
	return out
}
