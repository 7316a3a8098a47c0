package kabi

import (
	"errors"
	"fmt"

	"github.com/nvls-go/nvls/cuda"
	"github.com/nvls-go/nvls/kernels"
	"github.com/nvls-go/nvls/ptx"
)

// Module is every kernel of one flavor loaded into one context, with each
// entry point resolved, so that the launch path looks functions up by
// entry name without allocating.
type Module struct {
	d      cuda.Driver
	flavor kernels.Flavor
	mods   []cuda.Module
	// fns maps each entry point's name (kernels.Kernel.Name) to its
	// function.
	fns map[string]cuda.Function
	// noLL: the image has no LL entry points (PTX generated before them).
	noLL bool
	// noWait: some entry point lacks griddepcontrol.wait (PTX generated
	// before kernel_entry): no launch of the module may be programmatic.
	noWait bool
}

// Load loads the PTX images of flavor f (package ptx; NVLS_PTX_DIR
// overrides) into the context current on the calling OS thread and
// resolves every entry point of kernels.Kernels(f). The caller locks its goroutine
// to the thread and makes the device's context current, and calls Close
// with the same context current. On a JIT failure the error carries the
// driver's log.
//
// PTX generated before the LL kernels existed (no nvls_allreduce_ll_*
// entry in the allreduce image) still loads: the module then has no LL
// kernels (HasLL is false, AllReduce(LL, ...) reports none) and callers
// use the other algorithms. Any other missing entry point is an error.
func Load(d cuda.Driver, f kernels.Flavor) (*Module, error) {
	if !f.Valid() {
		return nil, fmt.Errorf("kernels: invalid flavor %v", f)
	}
	m := &Module{d: d, flavor: f, fns: map[string]cuda.Function{}}
	lls, all := 0, kernels.Kernels(f)
	for _, desc := range kernels.Descs() {
		src := desc.Name
		img, err := ptx.Image(src, f)
		var entries []ptx.Entry
		if err == nil {
			entries = ptx.Entries(img)
			err = checkParams(entries, ptx.FileName(src, f))
		}
		if err != nil {
			return nil, errors.Join(fmt.Errorf("kernels: loading %s kernels: %w", f, err), m.Close())
		}
		for _, e := range entries {
			m.noWait = m.noWait || !e.GridDepWait
		}
		mod, err := d.ModuleLoadData(img)
		if err != nil {
			return nil, errors.Join(fmt.Errorf("kernels: loading %s: %w", ptx.FileName(src, f), err), m.Close())
		}
		m.mods = append(m.mods, mod)
		for _, k := range all {
			if k.Coll != desc.Coll {
				continue
			}
			fn, err := d.ModuleGetFunction(mod, k.Name())
			if err != nil && errors.Is(err, cuda.ErrNotFound) && isLL(k) {
				m.noLL = true
				continue
			}
			if err != nil {
				return nil, errors.Join(fmt.Errorf("kernels: %s in %s: %w", k.Name(), ptx.FileName(src, f), err), m.Close())
			}
			lls += b2i(isLL(k))
			m.fns[k.Name()] = fn
		}
	}
	if m.noLL && lls > 0 {
		// All or none: a PTX with some LL entries but not others is
		// broken, not old.
		return nil, errors.Join(fmt.Errorf("kernels: %s has some LL all-reduce entry points but not all: %w", ptx.FileName("allreduce", f), cuda.ErrNotFound), m.Close())
	}
	return m, nil
}

// checkParams refuses an image whose entry points do not take one
// ParamsSize-byte parameter: PTX generated for another ABI would read the
// wrong fields (a kernel of the 152-byte ABI never sees host_status, and a
// failure would go unreported).
func checkParams(entries []ptx.Entry, file string) error {
	for _, e := range entries {
		if len(e.Params) != 1 || e.Params[0] != ParamsSize {
			return fmt.Errorf("%s: entry %s takes parameters of %v bytes, this build passes one of %d: the PTX is of another ABI (regenerate it: scripts/ptx-device.sh on a GPU machine, scripts/ptx-dev.sh for the simulator)",
				file, e.Name, e.Params, ParamsSize)
		}
	}
	return nil
}

func isLL(k kernels.Kernel) bool { return k.Coll == kernels.CollAllReduce && k.Algo == kernels.LL }

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

// HasLL reports whether the module has the LL all-reduce kernels (false
// for PTX generated before them; see Load).
func (m *Module) HasLL() bool { return !m.noLL && m.mods != nil }

// GridDepWait reports whether every entry point starts with
// griddepcontrol.wait (kernels/nvls.h's kernel_entry), so that its launches
// may be programmatic (cuda.LaunchConfig.Programmatic); false for PTX
// generated before kernel_entry.
func (m *Module) GridDepWait() bool { return !m.noWait && m.mods != nil }

// Flavor is the flavor the module was loaded with.
func (m *Module) Flavor() kernels.Flavor { return m.flavor }

// Func returns the function of entry point k; ok is false when the flavor
// (or PTX without LL kernels) has none, or k is invalid. It does not
// allocate.
func (m *Module) Func(k kernels.Kernel) (fn cuda.Function, ok bool) {
	name := k.Name()
	if name == "" || !k.In(m.flavor) || (isLL(k) && m.noLL) {
		return 0, false
	}
	return m.fns[name], true
}

// AllReduce returns the all-reduce kernel for algo, dt and op; ok is false
// when the flavor has none (see kernels.Supported) or an argument is
// invalid.
func (m *Module) AllReduce(algo kernels.Algo, dt kernels.DType, op kernels.RedOp) (fn cuda.Function, ok bool) {
	return m.Func(kernels.Kernel{Coll: kernels.CollAllReduce, Algo: algo, DType: dt, Op: op})
}

// Broadcast returns the broadcast kernel.
func (m *Module) Broadcast() cuda.Function { return m.fns[kernels.BroadcastName] }

// Barrier returns the barrier kernel.
func (m *Module) Barrier() cuda.Function { return m.fns[kernels.BarrierName] }

// Close unloads the modules (with the context they were loaded into
// current). Functions from m are invalid afterwards. Closing twice is a
// no-op.
func (m *Module) Close() error {
	var errs []error
	for _, mod := range m.mods {
		if err := m.d.ModuleUnload(mod); err != nil {
			errs = append(errs, fmt.Errorf("kernels: unloading module: %w", err))
		}
	}
	m.mods = nil
	m.fns = nil
	return errors.Join(errs...)
}
