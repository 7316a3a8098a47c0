//go:build linux && !osthread_goroutine

package osthread

import "syscall"

// byGoroutine: ID is the thread's own id here.
const byGoroutine = false

// ID identifies the calling OS thread: its Linux thread id (gettid).
func ID() int { return syscall.Gettid() }
