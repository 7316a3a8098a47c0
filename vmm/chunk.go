package vmm

import (
	"fmt"
	"io"
	"slices"

	"github.com/nvls-go/nvls/cuda"
)

// segment is one physical allocation mapped at a fixed offset of a
// logical range (Growable, Striped, Sparse).
type segment struct {
	off uint64 // offset in the logical range
	a   *Allocation
	m   *Mapping
}

func (s *segment) size() uint64 { return s.a.Size() }

// chunkProp holds what every chunk allocation of one structure shares.
type chunkProp struct {
	d      cuda.Driver
	access []cuda.Device
	flags  cuda.AccessFlags
	opts   AllocOptions
	// keep receives what an undo failed to release, in order, so that
	// the owner's Close retries it; nil: it is logged and lost.
	keep func([]io.Closer)
}

// newChunkProp is the chunkProp of a structure whose chunks live on
// homes: access (nil means homes; repeats dropped) is granted flags (zero
// means read-write). An empty access list is ErrNoDevices, and homes and
// access must be devices of d. what names the structure in errors.
func newChunkProp(d cuda.Driver, what string, homes, access []cuda.Device, flags cuda.AccessFlags, ao AllocOptions) (chunkProp, error) {
	if access == nil {
		access = homes
	}
	if len(access) == 0 {
		return chunkProp{}, fmt.Errorf("vmm: %s: %w", what, ErrNoDevices)
	}
	access = uniqueDevices(access)
	if err := checkDevices(d, slices.Concat(homes, access)); err != nil {
		return chunkProp{}, err
	}
	if flags == 0 {
		flags = cuda.AccessReadWrite
	}
	return chunkProp{d: d, access: access, flags: flags, opts: ao}, nil
}

// oneDevice is the setup of a structure whose chunks all live on dev
// (Sparse, Growable): its chunkProp (see newChunkProp; access nil means
// dev alone), dev's minimum granularity for ao.Handles, and the chunk
// size: chunk, or dev's recommended granularity when chunk is 0, which
// must be a multiple of the minimum. what names the structure in errors.
func oneDevice(d cuda.Driver, what string, dev cuda.Device, access []cuda.Device, flags cuda.AccessFlags, chunk uint64, ao AllocOptions) (cp chunkProp, gmin, size uint64, err error) {
	if cp, err = newChunkProp(d, what, []cuda.Device{dev}, access, flags, ao); err != nil {
		return chunkProp{}, 0, 0, err
	}
	if gmin, err = Granularity(d, dev, ao.Handles, false); err != nil {
		return chunkProp{}, 0, 0, err
	}
	if chunk == 0 {
		if chunk, err = Granularity(d, dev, ao.Handles, true); err != nil {
			return chunkProp{}, 0, 0, err
		}
	}
	if err := checkAligned(what+": chunk", chunk, gmin); err != nil {
		return chunkProp{}, 0, 0, err
	}
	return cp, gmin, chunk, nil
}

// undo closes cs in order, going on past failures; what fails goes to
// keep. It returns err, the error that made the undo necessary.
func (cp *chunkProp) undo(err error, cs ...io.Closer) error {
	left, uerr := closeAll(cs)
	if uerr != nil {
		if cp.keep != nil {
			cp.keep(left)
			log().Warn("undo failed; the owner's Close retries", "err", uerr, "left", len(left))
		} else {
			log().Warn("undo failed; resources are lost", "err", uerr, "left", len(left))
		}
	}
	return err
}

// newSegment creates size bytes on dev, maps them at off of r (whose
// logical offset is logical) and grants access. On failure nothing is
// left behind (what cannot be undone goes to cp.keep).
func (cp *chunkProp) newSegment(dev cuda.Device, size uint64, r *Reservation, resOff, logical uint64) (*segment, error) {
	prop, err := allocProp(cp.d, dev, cp.opts)
	if err != nil {
		return nil, err
	}
	a, err := create(cp.d, size, prop)
	if err != nil {
		return nil, err
	}
	m, err := a.MapInto(r, resOff)
	if err != nil {
		return nil, cp.undo(err, a)
	}
	if err := setAccessChecked(cp.d, m.Ptr(), m.Size(), cp.access, cp.flags); err != nil {
		return nil, cp.undo(err, m, a)
	}
	return &segment{off: logical, a: a, m: m}, nil
}

// setAccessChecked is cuMemSetAccess for devices already checked.
func setAccessChecked(d cuda.Driver, p cuda.DevicePtr, size uint64, devs []cuda.Device, flags cuda.AccessFlags) error {
	if err := d.MemSetAccess(p, size, accessDescs(devs, flags)); err != nil {
		return fmt.Errorf("vmm: set %v access at %#x+%d for devices %v: %w", flags, p, size, devs, err)
	}
	return nil
}

// granularityOf returns the least common multiple of the minimum (or
// recommended) granularities of devs for handles.
func granularityOf(d cuda.Driver, devs []cuda.Device, handles cuda.HandleType, recommended bool) (uint64, error) {
	var l uint64 = 1
	for _, dev := range devs {
		g, err := Granularity(d, dev, handles, recommended)
		if err != nil {
			return 0, err
		}
		l, err = lcm(l, g)
		if err != nil {
			return 0, err
		}
	}
	return l, nil
}

func gcd(a, b uint64) uint64 {
	for b != 0 {
		a, b = b, a%b
	}
	return a
}

func lcm(a, b uint64) (uint64, error) { return mulOK(a/gcd(a, b), b) }

// uniqueDevices returns devs without repeats, in first-seen order.
func uniqueDevices(devs []cuda.Device) []cuda.Device {
	var out []cuda.Device
	seen := map[cuda.Device]bool{}
	for _, d := range devs {
		if !seen[d] {
			seen[d] = true
			out = append(out, d)
		}
	}
	return out
}
