//go:build linux

// Package fdtest has test helpers for descriptor passing: memfd files that
// stand in for the POSIX file descriptors the CUDA driver exports, reading
// a file through a descriptor, counting the open descriptors of the
// process, a snapshot of what each descriptor refers to (a leak is a
// descriptor open that was not at the snapshot, whatever closed since), a copy of the test binary that a process of
// another uid can run, and a log sink that several goroutines write to.
// Linux only (memfd, /proc/self/fd), as is package fdpass.
package fdtest
