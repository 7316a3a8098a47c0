package kernels

import (
	"errors"
	"fmt"

	"github.com/nvls-go/nvls/cuda"
	"github.com/nvls-go/nvls/ptx"
)

// Module is every kernel of one flavor loaded into one context, with each
// entry point resolved, so that the launch path looks functions up by index
// without allocating.
type Module struct {
	d         cuda.Driver
	flavor    Flavor
	mods      []cuda.Module
	allreduce [numAlgos][numDTypes][numRedOps]cuda.Function
	broadcast cuda.Function
	barrier   cuda.Function
	// noLL: the image has no LL entry points (PTX generated before them).
	noLL bool
}

// Load loads the PTX images of flavor f (package ptx; NVLS_PTX_DIR
// overrides) into the context current on the calling OS thread and
// resolves every entry point of kernels.AllEntries(f). The caller locks its
// goroutine to the thread and makes the device's context current, and
// calls Close with the same context current. On a JIT failure the error
// carries the driver's log.
//
// PTX generated before the LL kernels existed (no nvls_allreduce_ll_*
// entry in the allreduce image) still loads: the module then has no LL
// kernels (HasLL is false, AllReduce(LL, ...) reports none) and callers
// use the other algorithms. Any other missing entry point is an error.
func Load(d cuda.Driver, f Flavor) (*Module, error) {
	if !f.Valid() {
		return nil, fmt.Errorf("kernels: invalid flavor %v", f)
	}
	m := &Module{d: d, flavor: f}
	for _, src := range Sources {
		img, err := ptx.Image(src, f)
		if err != nil {
			return nil, errors.Join(fmt.Errorf("kernels: loading %s kernels: %w", f, err), m.Close())
		}
		mod, err := d.ModuleLoadData(img)
		if err != nil {
			return nil, errors.Join(fmt.Errorf("kernels: loading %s: %w", ptx.FileName(src, f), err), m.Close())
		}
		m.mods = append(m.mods, mod)
		for _, name := range Entries(src, f) {
			fn, err := d.ModuleGetFunction(mod, name)
			if err != nil && errors.Is(err, cuda.ErrNotFound) && isLLName(name) {
				m.noLL = true
				continue
			}
			if err != nil {
				return nil, errors.Join(fmt.Errorf("kernels: %s in %s: %w", name, ptx.FileName(src, f), err), m.Close())
			}
			m.set(name, fn)
		}
	}
	if m.noLL && m.allreduce[LL] != ([numDTypes][numRedOps]cuda.Function{}) {
		// All or none: a PTX with some LL entries but not others is
		// broken, not old.
		return nil, errors.Join(fmt.Errorf("kernels: %s has some LL all-reduce entry points but not all: %w", ptx.FileName("allreduce", f), cuda.ErrNotFound), m.Close())
	}
	return m, nil
}

func isLLName(name string) bool {
	const prefix = "nvls_allreduce_ll_"
	return len(name) > len(prefix) && name[:len(prefix)] == prefix
}

// HasLL reports whether the module has the LL all-reduce kernels (false
// for PTX generated before them; see Load).
func (m *Module) HasLL() bool { return !m.noLL && m.mods != nil }

func (m *Module) set(name string, fn cuda.Function) {
	switch name {
	case BroadcastName:
		m.broadcast = fn
		return
	case BarrierName:
		m.barrier = fn
		return
	}
	for a := range numAlgos {
		for t := range numDTypes {
			for o := range numRedOps {
				if allreduceNames[a][t][o] == name {
					m.allreduce[a][t][o] = fn
					return
				}
			}
		}
	}
}

// Flavor is the flavor the module was loaded with.
func (m *Module) Flavor() Flavor { return m.flavor }

// AllReduce returns the all-reduce kernel for algo, dt and op; ok is false
// when the flavor has none (see Supported) or an argument is invalid.
func (m *Module) AllReduce(algo Algo, dt DType, op RedOp) (fn cuda.Function, ok bool) {
	if !algo.Valid() || !dt.Valid() || !op.Valid() || !Supported(m.flavor, dt, op) || (algo == LL && m.noLL) {
		return 0, false
	}
	return m.allreduce[algo][dt][op], true
}

// Broadcast returns the broadcast kernel.
func (m *Module) Broadcast() cuda.Function { return m.broadcast }

// Barrier returns the barrier kernel.
func (m *Module) Barrier() cuda.Function { return m.barrier }

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
	m.allreduce = [numAlgos][numDTypes][numRedOps]cuda.Function{}
	m.broadcast, m.barrier = 0, 0
	return errors.Join(errs...)
}
