package team

import (
	"errors"
	"fmt"
	"sort"

	"github.com/nvls-go/nvls/cuda"
)

// Alignment of the offsets Alloc hands out, in bytes.
const Alignment = 256

// sizeQuantum: buffer sizes are rounded up to it.
const sizeQuantum = 16

// Errors of Alloc and Free; match with errors.Is.
var (
	// ErrNoSpace: the data area has no free range that large.
	ErrNoSpace = errors.New("team: workspace data area exhausted")
	// ErrBadFree: Free of a buffer that is not live in this team (freed
	// already, from another team, or the zero Buffer).
	ErrBadFree = errors.New("team: Free of a buffer that is not live in this team")
	// ErrZeroSize: Alloc of zero bytes.
	ErrZeroSize = errors.New("team: zero-size buffer")
)

// Buffer is a symmetric buffer: the same offset in every rank's workspace
// data area, so that a kernel on any rank can reach any rank's copy.
type Buffer struct {
	t    *Team
	off  uint64
	size uint64
	id   uint64
}

// Ptr is the buffer's address on local rank localRank's device (its own
// workspace, through its UC alias).
func (b Buffer) Ptr(localRank int) cuda.DevicePtr {
	return cuda.DevicePtr(b.t.dataBase(localRank) + b.off)
}

// PeerPtr is the address, on local rank localRank's device, of rank
// rank's copy of the buffer (through the peer mapping; the local rank's
// own copy for its own rank).
func (b Buffer) PeerPtr(localRank, rank int) cuda.DevicePtr {
	return cuda.DevicePtr(b.t.peerDataBase(localRank, rank) + b.off)
}

// MulticastPtr is the buffer's address in local rank localRank's
// multicast alias (multimem instructions only), or 0 with the unicast
// transport.
func (b Buffer) MulticastPtr(localRank int) cuda.DevicePtr {
	base := b.t.ranks[localRank].mcBase
	if base == 0 {
		return 0
	}
	return cuda.DevicePtr(uint64(base) + b.t.agreed.layout.At(b.off))
}

// Offset is where the buffer starts in the data area (the same on every
// rank).
func (b Buffer) Offset() uint64 { return b.off }

// Size is the buffer's size: the requested size rounded up to 16 bytes.
func (b Buffer) Size() uint64 { return b.size }

// Team is the team the buffer belongs to (nil for the zero Buffer).
func (b Buffer) Team() *Team { return b.t }

// Alloc hands out a symmetric buffer of size bytes (rounded up to 16) from
// the data area, at the same offset on every rank, aligned to Alignment.
// With several processes (NewRank), every process must make the same
// Alloc and Free calls in the same order, so that offsets match.
func (t *Team) Alloc(size uint64) (Buffer, error) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.alloc == nil {
		return Buffer{}, ErrClosed
	}
	if t.fail != nil {
		return Buffer{}, t.fail
	}
	blk, err := t.alloc.alloc(size)
	if err != nil {
		return Buffer{}, err
	}
	return Buffer{t: t, off: blk.off, size: blk.size, id: blk.id}, nil
}

// Free returns a buffer. Freeing a buffer twice, one of another team or
// the zero Buffer is an error (ErrBadFree).
func (t *Team) Free(b Buffer) error {
	switch {
	case b.t == nil:
		return fmt.Errorf("%w: the zero Buffer (Alloc did not make it)", ErrBadFree)
	case b.t != t:
		return fmt.Errorf("%w: it belongs to another team", ErrBadFree)
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.alloc == nil {
		return ErrClosed
	}
	return t.alloc.release(b.off, b.id)
}

// bufferAt returns the live buffer (of Alloc, not yet freed) that holds
// all n bytes at offset off of the data area (Buffer.Offset's unit: a
// workspace offset less kabi.SignalBytes), and false when no buffer
// holds them all. It allocates nothing, for the collectives' launch path.
func (t *Team) bufferAt(off, n uint64) (Buffer, bool) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.alloc == nil {
		return Buffer{}, false
	}
	blk, ok := t.alloc.find(off, n)
	if !ok {
		return Buffer{}, false
	}
	return Buffer{t: t, off: blk.off, size: blk.size, id: blk.id}, true
}

// span is a free range of the data area.
type span struct{ off, len uint64 }

// block is a live buffer: its offset, its size (as Buffer.Size), the
// length it takes from the data area (size rounded up to Alignment) and
// the id that tells it from a later buffer at the same offset.
type block struct {
	off, size, len, id uint64
}

// allocator is a first-fit free list over [0, capacity) with coalescing,
// and the live blocks sorted by offset (for release and find).
type allocator struct {
	capacity uint64
	free     []span  // sorted by offset, never adjacent
	live     []block // sorted by offset
	nextID   uint64
	inUse    uint64
}

func newAllocator(capacity uint64) *allocator {
	a := &allocator{capacity: capacity}
	if capacity > 0 {
		a.free = []span{{0, capacity}}
	}
	return a
}

func roundUp(n, q uint64) uint64 {
	if r := n % q; r != 0 {
		return n + q - r
	}
	return n
}

// alloc takes a block of size bytes.
func (a *allocator) alloc(size uint64) (block, error) {
	if size == 0 {
		return block{}, fmt.Errorf("%w: Alloc(0); ask for 1 byte or more", ErrZeroSize)
	}
	if size > a.capacity {
		return block{}, fmt.Errorf("%w: Alloc(%d): the data area is %d bytes (WithWorkspaceSize)", ErrNoSpace, size, a.capacity)
	}
	n := roundUp(size, Alignment)
	for i, s := range a.free {
		if s.len < n {
			continue
		}
		if s.len == n {
			a.free = append(a.free[:i], a.free[i+1:]...)
		} else {
			a.free[i] = span{s.off + n, s.len - n}
		}
		a.nextID++
		b := block{off: s.off, size: roundUp(size, sizeQuantum), len: n, id: a.nextID}
		j := a.index(b.off)
		a.live = append(a.live, block{})
		copy(a.live[j+1:], a.live[j:])
		a.live[j] = b
		a.inUse += n
		return b, nil
	}
	return block{}, fmt.Errorf("%w: Alloc(%d): no free range of %d bytes (%d of %d in use)", ErrNoSpace, size, n, a.inUse, a.capacity)
}

// index is the position of the first live block at or after off.
func (a *allocator) index(off uint64) int {
	lo, hi := 0, len(a.live)
	for lo < hi {
		m := int(uint(lo+hi) >> 1)
		if a.live[m].off < off {
			lo = m + 1
		} else {
			hi = m
		}
	}
	return lo
}

// find is the live block that holds [off, off+n), if one does.
func (a *allocator) find(off, n uint64) (block, bool) {
	i := a.index(off + 1) // the first block starting after off
	if i == 0 {
		return block{}, false
	}
	b := a.live[i-1]
	if off-b.off >= b.size || n > b.size-(off-b.off) {
		return block{}, false
	}
	return b, true
}

// release returns the block at off made with id.
func (a *allocator) release(off, id uint64) error {
	i := a.index(off)
	if i == len(a.live) || a.live[i].off != off || a.live[i].id != id {
		return fmt.Errorf("%w: no live buffer at offset %d (freed already?)", ErrBadFree, off)
	}
	s := span{off, a.live[i].len}
	a.live = append(a.live[:i], a.live[i+1:]...)
	a.inUse -= s.len
	a.addFree(s)
	return nil
}

// addFree puts s back on the free list, merged with its neighbours.
func (a *allocator) addFree(s span) {
	i := sort.Search(len(a.free), func(i int) bool { return a.free[i].off > s.off })
	if i < len(a.free) && s.off+s.len == a.free[i].off {
		s.len += a.free[i].len
		a.free = append(a.free[:i], a.free[i+1:]...)
	}
	if i > 0 && a.free[i-1].off+a.free[i-1].len == s.off {
		a.free[i-1].len += s.len
		return
	}
	a.free = append(a.free, span{})
	copy(a.free[i+1:], a.free[i:])
	a.free[i] = s
}
