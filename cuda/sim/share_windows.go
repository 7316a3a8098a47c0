package sim

import (
	"errors"
	"fmt"
)

// posixFDs: Windows has no POSIX FD handles (its driver shares memory
// through Win32 handles, which the simulator does not model), so a node
// here is always configured NoPosixFD: the handle-type checks refuse
// POSIX FDs before anything below runs.
const posixFDs = false

var errNoPosixFD = errors.New("no POSIX file descriptor handles on windows")

func createExportFile(path string) (int, error) {
	return -1, fmt.Errorf("%s: %w", path, errNoPosixFD)
}

func fdKey(fd int) ([2]uint64, error) { return [2]uint64{}, errNoPosixFD }

func openFDKeys() map[[2]uint64]bool { return nil }
