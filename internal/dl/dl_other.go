//go:build !linux

package dl

import (
	"errors"
	"runtime"
)

// errPlatform is what every call answers on this system (see the package
// comment).
var errPlatform = errors.New("not supported on " + runtime.GOOS + "/" + runtime.GOARCH + ": nvls loads the CUDA and NCCL libraries on Linux only")

// Open loads nothing here: it returns errPlatform.
func Open(path string, global bool) (uintptr, error) { return 0, errPlatform }

// Sym returns errPlatform: no library is loaded here.
func Sym(h uintptr, name string) (uintptr, error) { return 0, errPlatform }

// Close returns errPlatform: no library is loaded here.
func Close(h uintptr) error { return errPlatform }
