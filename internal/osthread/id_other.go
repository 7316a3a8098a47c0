//go:build !linux || osthread_goroutine

package osthread

// byGoroutine: ID is the goroutine's id here.
const byGoroutine = true

// ID identifies the calling OS thread of a goroutine locked to it: the
// goroutine's id (see the package comment).
func ID() int { return goroutineID() }
