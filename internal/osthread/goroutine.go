package osthread

import (
	"runtime"
	"sync"
)

// stackBufs holds the buffers goroutineID reads its header into, so that
// a call allocates nothing (a buffer given to runtime.Stack escapes).
var stackBufs = sync.Pool{New: func() any { return new([64]byte) }}

// goroutineID is the calling goroutine's id, from the first line of its
// stack trace ("goroutine 18 [running]:"); ids are never reused. It is
// built on every OS, so that Linux's tests check it too.
func goroutineID() int {
	buf := stackBufs.Get().(*[64]byte)
	defer stackBufs.Put(buf)
	const prefix = "goroutine "
	b := buf[:runtime.Stack(buf[:], false)]
	if len(b) <= len(prefix) || string(b[:len(prefix)]) != prefix {
		panic("osthread: unexpected stack header " + string(b))
	}
	id := 0
	for _, c := range b[len(prefix):] {
		if c < '0' || c > '9' {
			break
		}
		id = id*10 + int(c-'0')
	}
	if id == 0 {
		panic("osthread: no goroutine id in stack header " + string(b))
	}
	return id
}
