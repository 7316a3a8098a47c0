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
	// already, or from another team).
	ErrBadFree = errors.New("team: buffer not allocated from this team")
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
	return cuda.DevicePtr(uint64(base) + b.t.signalBytes() + b.off)
}

// Offset is where the buffer starts in the data area (the same on every
// rank).
func (b Buffer) Offset() uint64 { return b.off }

// Size is the buffer's size: the requested size rounded up to 16 bytes.
func (b Buffer) Size() uint64 { return b.size }

// Team is the team the buffer belongs to (nil for the zero Buffer).
func (b Buffer) Team() *Team { return b.t }

type span struct{ off, len uint64 }

type live struct {
	len uint64
	id  uint64
}

// allocator is a first-fit free list over [0, capacity) with coalescing.
type allocator struct {
	capacity uint64
	free     []span // sorted by offset, never adjacent
	live     map[uint64]live
	nextID   uint64
	inUse    uint64
}

func newAllocator(capacity uint64) *allocator {
	a := &allocator{capacity: capacity, live: map[uint64]live{}}
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

// alloc returns the offset, rounded size and id of a new block.
func (a *allocator) alloc(size uint64) (off, rounded, id uint64, err error) {
	if size == 0 {
		return 0, 0, 0, ErrZeroSize
	}
	if size > a.capacity {
		return 0, 0, 0, fmt.Errorf("%w: %d bytes asked, the data area is %d", ErrNoSpace, size, a.capacity)
	}
	rounded = roundUp(size, sizeQuantum)
	blk := roundUp(size, Alignment)
	for i, s := range a.free {
		if s.len < blk {
			continue
		}
		off = s.off
		if s.len == blk {
			a.free = append(a.free[:i], a.free[i+1:]...)
		} else {
			a.free[i] = span{s.off + blk, s.len - blk}
		}
		a.nextID++
		a.live[off] = live{len: blk, id: a.nextID}
		a.inUse += blk
		return off, rounded, a.nextID, nil
	}
	return 0, 0, 0, fmt.Errorf("%w: no free range of %d bytes (%d of %d in use)", ErrNoSpace, blk, a.inUse, a.capacity)
}

// release returns the block at off made with id.
func (a *allocator) release(off, id uint64) error {
	l, ok := a.live[off]
	if !ok || l.id != id {
		return fmt.Errorf("%w: offset %d is not live (double free?)", ErrBadFree, off)
	}
	delete(a.live, off)
	a.inUse -= l.len
	i := sort.Search(len(a.free), func(i int) bool { return a.free[i].off > off })
	s := span{off, l.len}
	// Merge with the next span, then with the previous one.
	if i < len(a.free) && s.off+s.len == a.free[i].off {
		s.len += a.free[i].len
		a.free = append(a.free[:i], a.free[i+1:]...)
	}
	if i > 0 && a.free[i-1].off+a.free[i-1].len == s.off {
		a.free[i-1].len += s.len
		return nil
	}
	a.free = append(a.free, span{})
	copy(a.free[i+1:], a.free[i:])
	a.free[i] = s
	return nil
}
