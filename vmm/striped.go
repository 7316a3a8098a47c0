package vmm

import (
	"fmt"
	"io"

	"github.com/nvls-go/nvls/cuda"
)

// StripedOptions configure NewStriped.
type StripedOptions struct {
	// Devices are the GPUs the chunks live on: chunk i on
	// Devices[i % len(Devices)], unless Layout is set.
	Devices []cuda.Device
	// Layout, when set, names the device of chunk i (of Chunks in all)
	// instead of the round-robin over Devices.
	Layout func(i int) cuda.Device
	// Access lists the devices granted Flags on the whole range; nil
	// means every device that holds a chunk.
	Access []cuda.Device
	// Flags are the rights granted (cuda.AccessReadWrite when zero).
	Flags cuda.AccessFlags
	// Chunk is the size of one stripe: a multiple of every device's
	// minimum granularity (default: the least common multiple of their
	// recommended granularities).
	Chunk uint64
	// Handles, Compress, GPUDirectRDMA: as in AllocOptions, for every
	// chunk.
	Handles       cuda.HandleType
	Compress      bool
	GPUDirectRDMA bool
}

// Striped is one contiguous virtual range whose chunks live on different
// GPUs: chunk i (bytes [i*Chunk, (i+1)*Chunk)) on Devices[i mod N], or
// where a layout puts it. Kernels on any device of the access list see
// one flat array spread over the GPUs' memories (remote chunks over
// NVLink). Its methods need no current context.
type Striped struct {
	res     *Reservation
	segs    []*segment
	chunk   uint64
	size    uint64
	devs    []cuda.Device
	acc     []cuda.Device
	closing closing
}

// NewStriped makes a striped range of at least size bytes (rounded up to
// the chunk).
func NewStriped(d cuda.Driver, size uint64, opts StripedOptions) (*Striped, error) {
	if d == nil {
		return nil, fmt.Errorf("vmm: striped: %w (nil driver)", ErrNilHandle)
	}
	if size == 0 {
		return nil, fmt.Errorf("vmm: striped: %w", ErrZeroSize)
	}
	if len(opts.Devices) == 0 && opts.Layout == nil {
		return nil, fmt.Errorf("vmm: striped: %w", ErrNoDevices)
	}
	chunk, err := opts.chunk(d)
	if err != nil {
		return nil, err
	}
	total, err := AlignUp(size, chunk)
	if err != nil {
		return nil, err
	}
	devs := opts.layout(total / chunk)
	used := uniqueDevices(devs)
	if err := checkDevices(d, used); err != nil {
		return nil, fmt.Errorf("vmm: striped layout: %w", err)
	}
	gmin, err := granularityOf(d, used, opts.Handles, false)
	if err != nil {
		return nil, err
	}
	if err := checkAligned("striped: chunk", chunk, gmin); err != nil {
		return nil, err
	}
	cp, err := newChunkProp(d, "striped", used, opts.Access, opts.Flags,
		AllocOptions{Handles: opts.Handles, Compress: opts.Compress, GPUDirectRDMA: opts.GPUDirectRDMA})
	if err != nil {
		return nil, err
	}
	res, err := Reserve(d, total, gmin, 0)
	if err != nil {
		return nil, err
	}
	s := &Striped{res: res, chunk: chunk, size: total, devs: devs, acc: cp.access}
	for i, dev := range devs {
		off := uint64(i) * chunk
		seg, err := cp.newSegment(dev, chunk, res, off, off)
		if err != nil {
			return nil, closeFirst(fmt.Errorf("vmm: striped chunk %d on device %d: %w", i, dev, err), s)
		}
		s.segs = append(s.segs, seg)
	}
	return s, nil
}

// chunk is the stripe size: Chunk, or else the least common multiple of
// the recommended granularities of Devices (of Layout(0) when only a
// layout is given: a first guess, which NewStriped checks against every
// device of the layout).
func (o StripedOptions) chunk(d cuda.Driver) (uint64, error) {
	candidates := uniqueDevices(o.Devices)
	if err := checkDevices(d, candidates); err != nil {
		return 0, err
	}
	if o.Layout != nil && len(candidates) == 0 {
		candidates = []cuda.Device{o.Layout(0)}
		if err := checkDevices(d, candidates); err != nil {
			return 0, err
		}
	}
	if o.Chunk != 0 {
		return o.Chunk, nil
	}
	return granularityOf(d, candidates, o.Handles, true)
}

// layout lists the devices of n chunks: Layout's, or round-robin over
// Devices.
func (o StripedOptions) layout(n uint64) []cuda.Device {
	devs := make([]cuda.Device, n)
	for i := range devs {
		if o.Layout != nil {
			devs[i] = o.Layout(i)
		} else {
			devs[i] = o.Devices[i%len(o.Devices)]
		}
	}
	return devs
}

// Ptr is the first address of the range.
func (s *Striped) Ptr() cuda.DevicePtr { return s.res.Ptr() }

// Size is the length of the range: the requested size rounded up to the
// chunk.
func (s *Striped) Size() uint64 { return s.size }

// Chunk is the stripe size.
func (s *Striped) Chunk() uint64 { return s.chunk }

// Chunks is the number of stripes.
func (s *Striped) Chunks() int { return len(s.devs) }

// DeviceOf is the device that holds chunk i.
func (s *Striped) DeviceOf(i int) cuda.Device { return s.devs[i] }

// Access is the devices granted access.
func (s *Striped) Access() []cuda.Device { return append([]cuda.Device(nil), s.acc...) }

// Compressed reports whether every chunk was granted compression.
func (s *Striped) Compressed() bool {
	for _, seg := range s.segs {
		if !seg.a.Compressed() {
			return false
		}
	}
	return len(s.segs) > 0
}

// Close unmaps and releases every chunk and frees the range, going on
// past failures and returning the first error. Close again retries only
// what failed; once all is released it returns ErrClosed.
func (s *Striped) Close() error {
	return s.closing.close("striped", func() []io.Closer {
		var cs []io.Closer
		for i := len(s.segs) - 1; i >= 0; i-- {
			cs = append(cs, s.segs[i].m, s.segs[i].a)
		}
		s.segs = nil
		return append(cs, s.res)
	})
}
