package posixfd

import (
	"errors"
	"fmt"
)

// Close fails: Windows has no POSIX file descriptors.
func Close(fd int) error { return unsupported(fd) }

// DupCloexec fails: Windows has no POSIX file descriptors.
func DupCloexec(fd int) (int, error) { return -1, unsupported(fd) }

func unsupported(fd int) error {
	return fmt.Errorf("fd %d: %w: no POSIX file descriptors on windows", fd, errors.ErrUnsupported)
}
