package cuda

import (
	"runtime"
	"unsafe"
)

// CUjit_option values for the JIT logs.
const (
	jitInfoLogBuffer          = 3 // CU_JIT_INFO_LOG_BUFFER
	jitInfoLogBufferSizeBytes = 4 // CU_JIT_INFO_LOG_BUFFER_SIZE_BYTES
	jitErrorLogBuffer         = 5 // CU_JIT_ERROR_LOG_BUFFER
	jitErrorLogBufferSizeByte = 6 // CU_JIT_ERROR_LOG_BUFFER_SIZE_BYTES
)

// jitLogSize is the size of each JIT log buffer.
const jitLogSize = 16 << 10

type jitLogs struct {
	info, errs [jitLogSize]byte
}

// detail is what the logs say, for the *Error of a failed JIT.
func (j *jitLogs) detail() string {
	detail := ""
	if s := bufString(j.errs[:]); s != "" {
		detail = "JIT error log: " + s
	}
	if s := bufString(j.info[:]); s != "" {
		if detail != "" {
			detail += "; "
		}
		detail += "JIT info log: " + s
	}
	return detail
}

// ModuleLoadData is cuModuleLoadDataEx with the JIT's info and error logs
// captured: when the JIT fails, the *Error's Detail carries the logs after
// the driver's description. A PTX image without a terminating NUL is copied
// with one appended (the caller's slice is not modified); ELF cubins and
// fatbins are passed as they are.
func (l *Lib) ModuleLoadData(image []byte) (Module, error) {
	if len(image) == 0 {
		return 0, l.invalid(pModuleLoadDataEx, "empty module image")
	}
	img := image
	if needsNUL(image) {
		img = make([]byte, len(image)+1)
		copy(img, image)
	}
	// The driver writes the logs through pointers held in optionValues,
	// which the Go runtime cannot see: pin the buffers.
	logs := new(jitLogs)
	var pin runtime.Pinner
	pin.Pin(logs)
	defer pin.Unpin()
	opts := [4]int32{jitInfoLogBuffer, jitInfoLogBufferSizeBytes, jitErrorLogBuffer, jitErrorLogBufferSizeByte}
	vals := [4]uintptr{uintptr(unsafe.Pointer(&logs.info[0])), jitLogSize, uintptr(unsafe.Pointer(&logs.errs[0])), jitLogSize}
	var m Module
	code, err := l.result(pModuleLoadDataEx, uintptr(unsafe.Pointer(&m)), uintptr(unsafe.Pointer(&img[0])),
		uintptr(len(opts)), uintptr(unsafe.Pointer(&opts[0])), uintptr(unsafe.Pointer(&vals[0])))
	runtime.KeepAlive(img)
	if err == nil && code != Success {
		err = l.fail(pModuleLoadDataEx, code, logs.detail())
	}
	return out(m, err)
}

// needsNUL reports whether image is text (PTX) lacking its terminating NUL.
func needsNUL(image []byte) bool {
	if len(image) >= 4 {
		switch {
		case image[0] == 0x7f && image[1] == 'E' && image[2] == 'L' && image[3] == 'F':
			return false // cubin
		case image[0] == 0x50 && image[1] == 0xed && image[2] == 0x55 && image[3] == 0xba:
			return false // fatbin (magic 0xba55ed50, little-endian)
		}
	}
	return image[len(image)-1] != 0
}

// ModuleUnload is cuModuleUnload.
func (l *Lib) ModuleUnload(m Module) error { return l.call(pModuleUnload, uintptr(m)) }

// ModuleGetFunction is cuModuleGetFunction.
func (l *Lib) ModuleGetFunction(m Module, name string) (Function, error) {
	cname := cString(name)
	var f Function
	code, err := l.result(pModuleGetFunction, uintptr(unsafe.Pointer(&f)), uintptr(m), uintptr(unsafe.Pointer(&cname[0])))
	if err == nil && code != Success {
		err = l.fail(pModuleGetFunction, code, "function "+name)
	}
	return out(f, err)
}

// LaunchKernel is cuLaunchKernel with kernelParams = {params}: the kernel's
// one parameter is the paramSize bytes at params, which the driver copies
// during the call (the driver takes the size from the kernel's signature;
// paramSize documents the caller's intent and must be 0 when params is
// nil). A nil params launches a kernel that takes no parameter. It
// allocates nothing: the arguments and the kernelParams array live in a
// pooled block (callBlock), and params, stored there, is kept alive until
// the driver has copied it.
func (l *Lib) LaunchKernel(f Function, grid, block Dim3, sharedMem uint32, s Stream, params unsafe.Pointer, paramSize uintptr) error {
	if params == nil && paramSize != 0 {
		return l.invalid(pLaunchKernel, "nil params with a non-zero size")
	}
	b := hotArgs()
	b.a = [11]uintptr{uintptr(f), uintptr(grid.X), uintptr(grid.Y), uintptr(grid.Z),
		uintptr(block.X), uintptr(block.Y), uintptr(block.Z), uintptr(sharedMem), uintptr(s), 0, 0}
	if params != nil {
		b.params[0] = params
		b.a[9] = uintptr(unsafe.Pointer(&b.params[0]))
	}
	err := l.callHot(pLaunchKernel, b, 11)
	runtime.KeepAlive(params)
	return err
}

// LaunchKernelEx is cuLaunchKernelEx(config, f, kernelParams = {params},
// NULL): LaunchKernel with cfg's launch attributes. Like LaunchKernel it
// allocates nothing: the CUlaunchConfig and its attribute live in the
// pooled argument block.
func (l *Lib) LaunchKernelEx(f Function, cfg LaunchConfig, params unsafe.Pointer, paramSize uintptr) error {
	if params == nil && paramSize != 0 {
		return l.invalid(pLaunchKernelEx, "nil params with a non-zero size")
	}
	b := hotArgs()
	b.cfg = launchConfig{
		grid:      [3]uint32{cfg.Grid.X, cfg.Grid.Y, cfg.Grid.Z},
		block:     [3]uint32{cfg.Block.X, cfg.Block.Y, cfg.Block.Z},
		sharedMem: cfg.SharedMem,
		stream:    uintptr(cfg.Stream),
	}
	if cfg.Programmatic {
		b.attr[0] = launchAttr{id: attrProgrammaticStreamSerialization}
		b.attr[0].value[0] = 1
		b.cfg.attrs = uintptr(unsafe.Pointer(&b.attr[0]))
		b.cfg.numAttrs = 1
	}
	b.a[0] = uintptr(unsafe.Pointer(&b.cfg))
	b.a[1] = uintptr(f)
	if params != nil {
		b.params[0] = params
		b.a[2] = uintptr(unsafe.Pointer(&b.params[0]))
	}
	err := l.callHot(pLaunchKernelEx, b, 4)
	runtime.KeepAlive(params)
	return err
}
