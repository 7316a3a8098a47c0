// Package osthread identifies the calling OS thread of a goroutine locked
// to it (runtime.LockOSThread). The simulated driver (cuda/sim) keys the
// CUDA driver's per-thread state by it (the current context, the thread
// that began a stream capture), as the real driver does, and the tests
// use it to tell which thread a call ran on.
//
// On Linux, ID is gettid(2). Elsewhere (macOS, Windows) ID is the calling
// goroutine's id: macOS has no thread id call without cgo or loading
// libSystem (pthread_threadid_np), and one implementation for both, built
// and tested on Linux too, beats two untested ones. While a goroutine is
// locked to its thread, the thread runs only that goroutine and the
// goroutine runs only there, so the two identify each other, which is all
// the simulator needs from a thread id (callers lock their goroutine to
// its thread, as with the real driver). What it does not model there: an
// unlocked goroutine keeps one id where its thread would change under it,
// so a caller that forgot to lock its thread is not caught; and state set
// on a thread stays with the goroutine, not with the thread, after
// UnlockOSThread.
//
// The build tag osthread_goroutine selects the goroutine id on Linux too,
// so that Linux CI runs the simulator's tests as they run on macOS and
// Windows (make cross).
package osthread
