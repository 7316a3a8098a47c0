package osthread

import (
	"runtime"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// impls are the identities under test: ID as this build has it, and the
// goroutine id that ID is on the other OSes (built and checked here too).
var impls = map[string]func() int{"ID": ID, "goroutineID": goroutineID}

// TestBuild: the build tag (or the OS) chose the implementation.
func TestBuild(t *testing.T) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	if byGoroutine {
		require.Equal(t, goroutineID(), ID())
	}
	t.Logf("%s/%s: ID by goroutine: %v", runtime.GOOS, runtime.GOARCH, byGoroutine)
}

// TestLockedThreads: each of several goroutines locked to their threads
// at once sees one id, the same after it yields, sleeps and allocates, and
// no two of them share an id.
func TestLockedThreads(t *testing.T) {
	const n = 8
	for name, id := range impls {
		t.Run(name, func(t *testing.T) {
			ids := make([]int, n)
			var ready, done sync.WaitGroup
			ready.Add(n)
			done.Add(n)
			release := make(chan struct{})
			for g := range n {
				go func() {
					defer done.Done()
					runtime.LockOSThread()
					defer runtime.UnlockOSThread()
					ids[g] = id()
					ready.Done()
					<-release // all n hold their threads together
					for range 100 {
						runtime.Gosched()
						time.Sleep(10 * time.Microsecond)
						_ = make([]byte, 1<<10)
						if got := id(); got != ids[g] {
							t.Errorf("goroutine %d: id %d, then %d on the same locked thread", g, ids[g], got)
							return
						}
					}
				}()
			}
			ready.Wait()
			close(release)
			done.Wait()
			seen := map[int]int{}
			for g, v := range ids {
				assert.NotZero(t, v, "goroutine %d", g)
				if h, dup := seen[v]; dup {
					t.Errorf("goroutines %d and %d, locked to two threads, share id %d", h, g, v)
				}
				seen[v] = g
			}
		})
	}
}

// TestNotReused: a goroutine's id differs from those of goroutines that
// ended before it (the simulator's entries of an ended goroutine are not
// inherited); the Linux thread id may be reused, so only goroutineID.
func TestNotReused(t *testing.T) {
	seen := map[int]bool{goroutineID(): true}
	for range 50 {
		ch := make(chan int)
		go func() {
			runtime.LockOSThread() // ends with the thread
			ch <- goroutineID()
		}()
		v := <-ch
		require.False(t, seen[v], "id %d again", v)
		seen[v] = true
	}
}

// TestAllocatesNothing: the simulator asks on every call, and the launch
// path's allocation tests count what the calls allocate.
func TestAllocatesNothing(t *testing.T) {
	for name, id := range impls {
		assert.Zero(t, testing.AllocsPerRun(1000, func() { _ = id() }), name)
	}
}

func BenchmarkID(b *testing.B) {
	for name, id := range impls {
		b.Run(name, func(b *testing.B) {
			for b.Loop() {
				_ = id()
			}
		})
	}
}
