package vmm

import (
	"fmt"
	"io"
	"sort"
	"sync"

	"github.com/nvls-go/nvls/cuda"
)

// SparseOptions configure NewSparse.
type SparseOptions struct {
	// Device is where committed chunks live.
	Device cuda.Device
	// Access lists the devices granted Flags on committed chunks; nil
	// means Device alone.
	Access []cuda.Device
	// Flags are the rights granted (cuda.AccessReadWrite when zero).
	Flags cuda.AccessFlags
	// Chunk is the unit of commitment: a multiple of Device's minimum
	// granularity (default: its recommended granularity).
	Chunk uint64
	// Handles, Compress, GPUDirectRDMA: as in AllocOptions, for every
	// chunk.
	Handles       cuda.HandleType
	Compress      bool
	GPUDirectRDMA bool
}

// Sparse is a large virtual range whose chunks are backed by physical
// memory only once committed. An access to an uncommitted chunk faults
// (it is not mapped). A Sparse is safe for concurrent use; its methods
// need no current context.
type Sparse struct {
	mu      sync.Mutex
	cp      chunkProp
	dev     cuda.Device
	res     *Reservation
	chunk   uint64
	segs    map[uint64]*segment // by chunk index
	stale   []io.Closer
	closing closing
}

// NewSparse reserves size bytes (rounded up to the chunk) with nothing
// committed.
func NewSparse(d cuda.Driver, size uint64, opts SparseOptions) (*Sparse, error) {
	if d == nil {
		return nil, fmt.Errorf("vmm: sparse: %w (nil driver)", ErrNilHandle)
	}
	if size == 0 {
		return nil, fmt.Errorf("vmm: sparse: %w", ErrZeroSize)
	}
	cp, gmin, chunk, err := oneDevice(d, "sparse", opts.Device, opts.Access, opts.Flags, opts.Chunk,
		AllocOptions{Handles: opts.Handles, Compress: opts.Compress, GPUDirectRDMA: opts.GPUDirectRDMA})
	if err != nil {
		return nil, err
	}
	total, err := AlignUp(size, chunk)
	if err != nil {
		return nil, err
	}
	res, err := Reserve(d, total, gmin, 0)
	if err != nil {
		return nil, err
	}
	s := &Sparse{
		cp:    cp,
		dev:   opts.Device,
		res:   res,
		chunk: chunk,
		segs:  map[uint64]*segment{},
	}
	s.cp.keep = func(left []io.Closer) { s.stale = append(s.stale, left...) }
	return s, nil
}

// Ptr is the first address of the range.
func (s *Sparse) Ptr() cuda.DevicePtr { return s.res.Ptr() }

// Size is the length of the range.
func (s *Sparse) Size() uint64 { return s.res.Size() }

// Chunk is the unit of commitment.
func (s *Sparse) Chunk() uint64 { return s.chunk }

// Committed is the number of bytes backed by physical memory.
func (s *Sparse) Committed() uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	return uint64(len(s.segs)) * s.chunk
}

// IsCommitted reports whether the chunk holding byte off is committed.
func (s *Sparse) IsCommitted(off uint64) bool {
	s.mu.Lock()
	defer s.mu.Unlock()
	_, ok := s.segs[off/s.chunk]
	return ok
}

// CommittedRanges returns the committed byte ranges [start, end) in
// order, adjacent chunks merged.
func (s *Sparse) CommittedRanges() [][2]uint64 {
	s.mu.Lock()
	defer s.mu.Unlock()
	idx := make([]uint64, 0, len(s.segs))
	for i := range s.segs {
		idx = append(idx, i)
	}
	sort.Slice(idx, func(a, b int) bool { return idx[a] < idx[b] })
	var out [][2]uint64
	for _, i := range idx {
		lo, hi := i*s.chunk, (i+1)*s.chunk
		if k := len(out); k > 0 && out[k-1][1] == lo {
			out[k-1][1] = hi
			continue
		}
		out = append(out, [2]uint64{lo, hi})
	}
	return out
}

// span checks that [off, off+n) is chunk-aligned and inside the range and
// returns its chunk indices.
func (s *Sparse) span(op string, off, n uint64) (uint64, uint64, error) {
	if s.closing.started {
		return 0, 0, fmt.Errorf("vmm: sparse %s: %w", op, ErrClosed)
	}
	if n == 0 {
		return 0, 0, fmt.Errorf("vmm: sparse %s at %d: %w", op, off, ErrZeroSize)
	}
	if off%s.chunk != 0 || n%s.chunk != 0 {
		return 0, 0, fmt.Errorf("vmm: sparse %s [%d, +%d): offset and size must be multiples of the chunk %d: %w", op, off, n, s.chunk, ErrNotAligned)
	}
	if err := s.res.contains(off, n); err != nil {
		return 0, 0, fmt.Errorf("vmm: sparse %s: %w", op, err)
	}
	return off / s.chunk, (off + n) / s.chunk, nil
}

// Commit backs [off, off+n) with physical memory: chunks not yet
// committed are created, mapped and made accessible; committed ones are
// left as they are (with their contents). off and n are multiples of
// Chunk. On failure the chunks this call committed are decommitted again.
func (s *Sparse) Commit(off, n uint64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	lo, hi, err := s.span("commit", off, n)
	if err != nil {
		return err
	}
	if len(s.stale) > 0 {
		// Leftovers of an earlier failure may sit where the chunks go.
		s.stale, _ = closeAll(s.stale)
	}
	var made []uint64
	for i := lo; i < hi; i++ {
		if _, ok := s.segs[i]; ok {
			continue
		}
		o := i * s.chunk
		seg, err := s.cp.newSegment(s.dev, s.chunk, s.res, o, o)
		if err != nil {
			var cs []io.Closer
			for k := len(made) - 1; k >= 0; k-- {
				cs = append(cs, s.segs[made[k]].m, s.segs[made[k]].a)
				delete(s.segs, made[k])
			}
			s.cp.undo(nil, cs...)
			return fmt.Errorf("vmm: sparse commit of chunk %d: %w", i, err)
		}
		s.segs[i] = seg
		made = append(made, i)
	}
	return nil
}

// Decommit unmaps and releases the committed chunks of [off, off+n); their
// contents are lost and accesses to them fault again. off and n are
// multiples of Chunk. It goes on past failures and returns the first; a
// chunk whose unmap failed stays committed.
func (s *Sparse) Decommit(off, n uint64) error {
	s.mu.Lock()
	defer s.mu.Unlock()
	lo, hi, err := s.span("decommit", off, n)
	if err != nil {
		return err
	}
	var first error
	for i := lo; i < hi; i++ {
		seg, ok := s.segs[i]
		if !ok {
			continue
		}
		if err := seg.m.Close(); err != nil {
			if first == nil {
				first = fmt.Errorf("vmm: sparse decommit of chunk %d: %w", i, err)
			}
			continue
		}
		delete(s.segs, i)
		if err := seg.a.Close(); err != nil {
			s.stale = append(s.stale, seg.a)
			if first == nil {
				first = fmt.Errorf("vmm: sparse decommit of chunk %d: %w", i, err)
			}
		}
	}
	return first
}

// Close decommits everything and frees the range, going on past failures
// and returning the first error. Close again retries only what failed;
// once all is released it returns ErrClosed.
func (s *Sparse) Close() error {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.closing.close("sparse", func() []io.Closer {
		var cs []io.Closer
		for _, seg := range s.segs {
			cs = append(cs, seg.m, seg.a)
		}
		cs = append(cs, s.stale...)
		s.segs, s.stale = nil, nil
		return append(cs, s.res)
	})
}
