package sim

import (
	"bytes"
	"fmt"
	"regexp"
	"strings"
	"unsafe"

	"github.com/nvls-go/nvls/cuda"
)

// module is a loaded CUmodule.
type module struct {
	ctx    *context
	handle cuda.Module
	funcs  map[string]cuda.Function
}

// function is a CUfunction.
type function struct {
	mod  *module
	name string
	fn   KernelFunc
}

var (
	entryRE        = regexp.MustCompile(`\.entry\s+([A-Za-z_$%][A-Za-z0-9_$]*)`)
	lineCommentRE  = regexp.MustCompile(`//[^\n]*`)
	blockCommentRE = regexp.MustCompile(`(?s)/\*.*?\*/`)
)

// PTXEntries returns the names of the kernel entry points (.entry, with or
// without .visible) that a PTX text declares, in order, ignoring comments.
func PTXEntries(ptx []byte) []string {
	if i := bytes.IndexByte(ptx, 0); i >= 0 {
		ptx = ptx[:i]
	}
	src := blockCommentRE.ReplaceAll(ptx, nil)
	src = lineCommentRE.ReplaceAll(src, nil)
	var out []string
	for _, m := range entryRE.FindAllSubmatch(src, -1) {
		out = append(out, string(m[1]))
	}
	return out
}

// ModuleLoadData is cuModuleLoadData for PTX text: every .entry must have
// an implementation registered with RegisterKernel, else the "JIT" fails
// with CUDA_ERROR_INVALID_PTX and a log naming the entry.
func (n *Node) ModuleLoadData(image []byte) (m cuda.Module, err error) {
	const opName = "cuModuleLoadData"
	i, err := n.enter(opName, -1, 0, 0, uint64(len(image)))
	if err != nil {
		return 0, err
	}
	defer n.leave(i, &err)
	ctx, err := n.cur(opName)
	if err != nil {
		return 0, err
	}
	n.setCallDevice(i, ctx.dev)
	if len(image) == 0 {
		return 0, errf(opName, cuda.ErrorInvalidValue, "empty image")
	}
	if bytes.HasPrefix(image, []byte("\x7fELF")) {
		return 0, errf(opName, cuda.ErrorNoBinaryForGPU, "the simulator loads PTX text only, not cubin/ELF images")
	}
	names := PTXEntries(image)
	if len(names) == 0 {
		return 0, errf(opName, cuda.ErrorInvalidPTX, "ptxas application ptx input, line 1; fatal   : no .entry found in the PTX (the simulator needs at least one kernel entry)")
	}
	mod := &module{ctx: ctx, funcs: map[string]cuda.Function{}}
	fns := make(map[string]KernelFunc, len(names))
	var missing []string
	for _, name := range names {
		fn, ok := LookupKernel(name)
		if !ok {
			missing = append(missing, name)
			continue
		}
		fns[name] = fn
	}
	if len(missing) > 0 {
		var log strings.Builder
		for _, name := range missing {
			fmt.Fprintf(&log, "ptxas fatal   : entry function '%s' has no simulated implementation (register one with sim.RegisterKernel)\n", name)
		}
		return 0, errf(opName, cuda.ErrorInvalidPTX, "%s", strings.TrimSpace(log.String()))
	}
	n.mu.Lock()
	defer n.mu.Unlock()
	mod.handle = cuda.Module(n.newID())
	for _, name := range names {
		f := cuda.Function(n.newID())
		mod.funcs[name] = f
		n.funcs[f] = &function{mod: mod, name: name, fn: fns[name]}
	}
	n.modules[mod.handle] = mod
	return mod.handle, nil
}

func (n *Node) unloadModuleLocked(h cuda.Module, m *module) {
	for _, f := range m.funcs {
		delete(n.funcs, f)
	}
	delete(n.modules, h)
}

// ModuleUnload is cuModuleUnload.
func (n *Node) ModuleUnload(h cuda.Module) (err error) {
	const opName = "cuModuleUnload"
	i, err := n.enter(opName, -1, uint64(h), 0, 0)
	if err != nil {
		return err
	}
	defer n.leave(i, &err)
	n.mu.Lock()
	defer n.mu.Unlock()
	m := n.modules[h]
	if m == nil {
		return errf(opName, cuda.ErrorInvalidHandle, "module %#x is not loaded", uint64(h))
	}
	n.setCallDevice(i, m.ctx.dev)
	n.unloadModuleLocked(h, m)
	return nil
}

// ModuleGetFunction is cuModuleGetFunction.
func (n *Node) ModuleGetFunction(h cuda.Module, name string) (f cuda.Function, err error) {
	const opName = "cuModuleGetFunction"
	i, err := n.enter(opName, -1, uint64(h), 0, 0)
	if err != nil {
		return 0, err
	}
	defer n.leave(i, &err)
	n.mu.Lock()
	defer n.mu.Unlock()
	m := n.modules[h]
	if m == nil {
		return 0, errf(opName, cuda.ErrorInvalidHandle, "module %#x is not loaded", uint64(h))
	}
	n.setCallDevice(i, m.ctx.dev)
	f, ok := m.funcs[name]
	if !ok {
		return 0, errf(opName, cuda.ErrorNotFound, "module %#x has no entry %q", uint64(h), name)
	}
	return f, nil
}

// maxParamBytes is the kernel parameter limit (32764 bytes since CUDA 12.1
// on Volta and later).
const maxParamBytes = 32764

// LaunchKernel is cuLaunchKernel with one by-value parameter: the params
// bytes are copied now; the stream's goroutine runs the registered
// KernelFunc when it reaches the launch.
func (n *Node) LaunchKernel(f cuda.Function, grid, block cuda.Dim3, sharedMem uint32, s cuda.Stream, params unsafe.Pointer, paramSize uintptr) (err error) {
	const opName = "cuLaunchKernel"
	i, err := n.enter(opName, -1, uint64(f), 0, uint64(paramSize))
	if err != nil {
		return err
	}
	defer n.leave(i, &err)
	ctx, err := n.cur(opName)
	if err != nil {
		return err
	}
	n.setCallDevice(i, ctx.dev)
	n.mu.Lock()
	fn := n.funcs[f]
	n.mu.Unlock()
	if fn == nil {
		return errf(opName, cuda.ErrorInvalidHandle, "function %#x does not exist (module unloaded?)", uint64(f))
	}
	if grid.X == 0 || grid.Y == 0 || grid.Z == 0 || block.X == 0 || block.Y == 0 || block.Z == 0 {
		return errf(opName, cuda.ErrorInvalidValue, "grid %v and block %v must have no zero dimension", grid, block)
	}
	if grid.Y > 65535 || grid.Z > 65535 || grid.X > 1<<31-1 {
		return errf(opName, cuda.ErrorInvalidValue, "grid %v exceeds the maximum (2^31-1, 65535, 65535)", grid)
	}
	if uint64(block.X)*uint64(block.Y)*uint64(block.Z) > 1024 || block.Z > 64 {
		return errf(opName, cuda.ErrorInvalidValue, "block %v has more than 1024 threads (or z > 64)", block)
	}
	if sharedMem > 227<<10 {
		return errf(opName, cuda.ErrorInvalidValue, "%d bytes of dynamic shared memory exceed the 227 KiB maximum", sharedMem)
	}
	if paramSize > maxParamBytes {
		return errf(opName, cuda.ErrorInvalidValue, "%d parameter bytes exceed the %d-byte limit", paramSize, maxParamBytes)
	}
	if paramSize > 0 && params == nil {
		return errf(opName, cuda.ErrorInvalidValue, "params is NULL with paramSize %d", paramSize)
	}
	st, err := n.streamFor(opName, s)
	if err != nil {
		return err
	}
	if st.ctx != fn.mod.ctx {
		return errf(opName, cuda.ErrorInvalidHandle, "stream %#x belongs to device %d, function %q to device %d", uint64(s), st.ctx.dev, fn.name, fn.mod.ctx.dev)
	}
	if err := ctx.stickyErr(opName); err != nil {
		return err
	}
	var p []byte
	if paramSize > 0 {
		p = bytes.Clone(unsafe.Slice((*byte)(params), paramSize))
	}
	dev := fn.mod.ctx.dev
	mem := n.Memory(dev)
	name, kfn := fn.name, fn.fn
	return st.submit(opName, func() error {
		l := &Launch{Name: name, Device: dev, Grid: grid, Block: block, SharedMem: sharedMem, Params: bytes.Clone(p), Mem: mem}
		if err := kfn(l); err != nil {
			return fmt.Errorf("kernel %s on device %d: %w", name, dev, err)
		}
		return nil
	})
}
