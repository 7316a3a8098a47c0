package sim

import (
	"bytes"
	"crypto/sha256"
	"fmt"
	"regexp"
	"strings"
	"sync"
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

var entryRE = regexp.MustCompile(`\.entry\s+([A-Za-z_$%][A-Za-z0-9_$]*)`)

// PTXEntries returns the names of the kernel entry points (.entry, with or
// without .visible) that a PTX text declares, in order, ignoring comments.
func PTXEntries(ptx []byte) []string { return scanPTX(ptx).entries }

// isPTX reports whether image is PTX text: its first directive, past
// comments and white space, is .version (as ptxas requires).
func isPTX(image []byte) bool { return scanPTX(image).ptx }

// ptxScan is what the simulator reads of an image: whether it is PTX text
// and its entry names.
type ptxScan struct {
	ptx     bool
	entries []string
}

// ptxScans caches scanPTX by the image's SHA-256: a collective loads the
// same megabytes of PTX on every rank of every team, and the fault tests
// build hundreds of teams.
var ptxScans sync.Map // [32]byte -> ptxScan

func scanPTX(image []byte) ptxScan {
	if i := bytes.IndexByte(image, 0); i >= 0 {
		image = image[:i]
	}
	key := sha256.Sum256(image)
	if v, ok := ptxScans.Load(key); ok {
		return v.(ptxScan)
	}
	src := stripComments(image)
	s := ptxScan{ptx: bytes.HasPrefix(bytes.TrimSpace(src), []byte(".version"))}
	for _, m := range entryRE.FindAllSubmatch(src, -1) {
		s.entries = append(s.entries, string(m[1]))
	}
	ptxScans.Store(key, s)
	return s
}

// stripComments removes PTX's // line and /* block */ comments (an
// unterminated block comment runs to the end), in one pass.
func stripComments(src []byte) []byte {
	out := make([]byte, 0, len(src))
	for len(src) > 0 {
		i := bytes.IndexByte(src, '/')
		if i < 0 || i+1 == len(src) {
			return append(out, src...)
		}
		out = append(out, src[:i]...)
		switch src[i+1] {
		case '/':
			j := bytes.IndexByte(src[i:], '\n')
			if j < 0 {
				return out
			}
			src = src[i+j:]
		case '*':
			j := bytes.Index(src[i+2:], []byte("*/"))
			if j < 0 {
				return out
			}
			src = src[i+2+j+2:]
		default:
			out = append(out, '/')
			src = src[i+1:]
		}
	}
	return out
}

// ModuleLoadData is cuModuleLoadData for PTX text: every .entry must have
// an implementation in Config.Kernels, else the "JIT" fails
// with CUDA_ERROR_INVALID_PTX and a log naming the entry. An image that is
// neither PTX nor ELF fails with CUDA_ERROR_INVALID_IMAGE, as from the
// driver (580.159.04, internal/simdiff).
func (n *Node) ModuleLoadData(image []byte) (cuda.Module, error) {
	return get(n.ctxCall("cuModuleLoadData", 0, 0, uint64(len(image))), func(c *call) (cuda.Module, error) {
		ctx := c.ctx
		if len(image) == 0 {
			return 0, c.errf(cuda.ErrorInvalidValue, "empty image")
		}
		if bytes.HasPrefix(image, []byte("\x7fELF")) {
			return 0, c.errf(cuda.ErrorNoBinaryForGPU, "the simulator loads PTX text only, not cubin/ELF images")
		}
		if !isPTX(image) {
			return 0, c.errf(cuda.ErrorInvalidImage, "device kernel image is invalid: not PTX text (no .version directive first) and not an ELF image")
		}
		names := PTXEntries(image)
		if len(names) == 0 {
			return 0, c.errf(cuda.ErrorInvalidPTX, "ptxas application ptx input, line 1; fatal   : no .entry found in the PTX (the simulator needs at least one kernel entry)")
		}
		mod := &module{ctx: ctx, funcs: map[string]cuda.Function{}}
		fns := make(map[string]KernelFunc, len(names))
		var missing []string
		for _, name := range names {
			fn, ok := n.cfg.Kernels[name]
			if !ok {
				missing = append(missing, name)
				continue
			}
			fns[name] = fn
		}
		if len(missing) > 0 {
			return 0, c.errf(cuda.ErrorInvalidPTX, "%s", missingLog(missing, len(names)))
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
	})
}

// missingLog is the JIT log of an image whose entry points missing (of
// total) have no implementation: one line, naming the first few and what
// registers nvls's own (one line per entry made 48 lines for one image).
func missingLog(missing []string, total int) string {
	const show = 3
	names := "'" + strings.Join(missing[:min(show, len(missing))], "', '") + "'"
	if len(missing) > show {
		names += fmt.Sprintf(" and %d more", len(missing)-show)
	}
	return fmt.Sprintf("ptxas fatal   : %d of the image's %d entry functions have no simulated implementation (%s): "+
		"the simulator runs a kernel by the Go function under its name in sim.Config.Kernels; "+
		"a node made by %s.New carries nvls's kernels",
		len(missing), total, names, simnodePath)
}

// The package that makes a node with nvls's kernels (named in
// missingLog; this package cannot import it: it imports this one).
const simnodePath = "github.com/nvls-go/nvls/simnode"

func (n *Node) unloadModuleLocked(h cuda.Module, m *module) {
	for _, f := range m.funcs {
		delete(n.funcs, f)
	}
	delete(n.modules, h)
}

// moduleLocked is the loaded module h, whose device the call then applies
// to (the caller holds n.mu).
func (c *call) moduleLocked(h cuda.Module) (*module, error) {
	m := c.n.modules[h]
	if m == nil {
		return nil, c.errf(cuda.ErrorInvalidHandle, "module %#x is not loaded", uint64(h))
	}
	c.device(m.ctx.dev)
	return m, nil
}

// ModuleUnload is cuModuleUnload.
func (n *Node) ModuleUnload(h cuda.Module) error {
	return n.call("cuModuleUnload", -1, uint64(h), 0, 0).do(func(c *call) error {
		n.mu.Lock()
		defer n.mu.Unlock()
		m, err := c.moduleLocked(h)
		if err != nil {
			return err
		}
		n.unloadModuleLocked(h, m)
		return nil
	})
}

// ModuleGetFunction is cuModuleGetFunction.
func (n *Node) ModuleGetFunction(h cuda.Module, name string) (cuda.Function, error) {
	return get(n.call("cuModuleGetFunction", -1, uint64(h), 0, 0), func(c *call) (cuda.Function, error) {
		n.mu.Lock()
		defer n.mu.Unlock()
		m, err := c.moduleLocked(h)
		if err != nil {
			return 0, err
		}
		f, ok := m.funcs[name]
		if !ok {
			return 0, c.errf(cuda.ErrorNotFound, "module %#x has no entry %q", uint64(h), name)
		}
		return f, nil
	})
}

// maxParamBytes is the kernel parameter limit (32764 bytes since CUDA 12.1
// on Volta and later).
const maxParamBytes = 32764

// LaunchKernel is cuLaunchKernel with one by-value parameter: the params
// bytes are copied now; the stream's goroutine runs the registered
// KernelFunc when it reaches the launch.
func (n *Node) LaunchKernel(f cuda.Function, grid, block cuda.Dim3, sharedMem uint32, s cuda.Stream, params unsafe.Pointer, paramSize uintptr) error {
	cfg := cuda.LaunchConfig{Grid: grid, Block: block, SharedMem: sharedMem, Stream: s}
	return n.launch("cuLaunchKernel", f, cfg, params, paramSize)
}

// LaunchKernelEx is cuLaunchKernelEx: LaunchKernel with cfg's attributes.
// The simulated devices are of compute capability 9.0, so Programmatic is
// accepted; a stream of the node runs its work in order, which is what a
// kernel that starts with griddepcontrol.wait sees. The launch carries the
// attribute (Launch.Programmatic) for the tests.
func (n *Node) LaunchKernelEx(f cuda.Function, cfg cuda.LaunchConfig, params unsafe.Pointer, paramSize uintptr) error {
	return n.launch("cuLaunchKernelEx", f, cfg, params, paramSize)
}

func (n *Node) launch(op string, f cuda.Function, cfg cuda.LaunchConfig, params unsafe.Pointer, paramSize uintptr) error {
	grid, block, sharedMem, s := cfg.Grid, cfg.Block, cfg.SharedMem, cfg.Stream
	return n.ctxCall(op, uint64(f), 0, uint64(paramSize)).do(func(c *call) error {
		ctx := c.ctx
		n.mu.Lock()
		fn := n.funcs[f]
		n.mu.Unlock()
		if fn == nil {
			return c.errf(cuda.ErrorInvalidHandle, "function %#x does not exist (module unloaded?)", uint64(f))
		}
		if grid.X == 0 || grid.Y == 0 || grid.Z == 0 || block.X == 0 || block.Y == 0 || block.Z == 0 {
			return c.errf(cuda.ErrorInvalidValue, "grid %v and block %v must have no zero dimension", grid, block)
		}
		if grid.Y > 65535 || grid.Z > 65535 || grid.X > 1<<31-1 {
			return c.errf(cuda.ErrorInvalidValue, "grid %v exceeds the maximum (2^31-1, 65535, 65535)", grid)
		}
		if uint64(block.X)*uint64(block.Y)*uint64(block.Z) > 1024 || block.Z > 64 {
			return c.errf(cuda.ErrorInvalidValue, "block %v has more than 1024 threads (or z > 64)", block)
		}
		if sharedMem > 227<<10 {
			return c.errf(cuda.ErrorInvalidValue, "%d bytes of dynamic shared memory exceed the 227 KiB maximum", sharedMem)
		}
		if paramSize > maxParamBytes {
			return c.errf(cuda.ErrorInvalidValue, "%d parameter bytes exceed the %d-byte limit", paramSize, maxParamBytes)
		}
		if paramSize > 0 && params == nil {
			return c.errf(cuda.ErrorInvalidValue, "params is NULL with paramSize %d", paramSize)
		}
		st, err := n.streamFor(c.op, s)
		if err != nil {
			return err
		}
		if st.ctx != fn.mod.ctx {
			return c.errf(cuda.ErrorInvalidHandle, "stream %#x belongs to device %d, function %q to device %d", uint64(s), st.ctx.dev, fn.name, fn.mod.ctx.dev)
		}
		if err := ctx.stickyErr(c.op); err != nil {
			return err
		}
		var p []byte
		if paramSize > 0 {
			p = bytes.Clone(unsafe.Slice((*byte)(params), paramSize))
		}
		dev := fn.mod.ctx.dev
		mem := n.Memory(dev)
		name, kfn := fn.name, fn.fn
		return st.submit(c.op, func() error {
			l := &Launch{Name: name, Device: dev, Grid: grid, Block: block, SharedMem: sharedMem, Programmatic: cfg.Programmatic,
				Params: bytes.Clone(p), Mem: mem}
			if err := kfn(l); err != nil {
				return fmt.Errorf("kernel %s on device %d: %w", name, dev, err)
			}
			return nil
		})
	})
}
