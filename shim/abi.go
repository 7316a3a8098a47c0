package main

/*
#include <stdlib.h>
#include <string.h>
#include "forward.h"
*/
import "C"

import (
	"fmt"
	"sync"
	"unsafe"

	"github.com/nvls-go/nvls/cuda"
	"github.com/nvls-go/nvls/nccl"
	"github.com/nvls-go/nvls/team/sock"
)

// The C ABI: NCCL's entry point ncclX is a C function (entry.c) that
// calls nvlsGoX here, unless the real NCCL is calling its own ncclX
// (then the real one runs). The nvlsGo* exports are internal to the
// shim: every one converts its arguments, calls the Go side and returns
// its ncclResult_t, leaving the error's text for ncclGetLastError.

func allocHandle() unsafe.Pointer { return C.malloc(16) }
func freeHandle(h unsafe.Pointer) { C.free(h) }

// ret records err's text as the last error and returns its code.
func ret(err error) C.ncclResult_t {
	if err != nil {
		msg := C.CString(err.Error())
		C.nvls_set_last_error(msg)
		C.free(unsafe.Pointer(msg))
		shim.log.Warn(err.Error())
	}
	return C.ncclResult_t(codeOf(err))
}

func nilArg(fn, arg string) C.ncclResult_t {
	return ret(fail(nccl.InvalidArgument, "libnccl-nvls: %s: %s is NULL", fn, arg))
}

//export nvlsGoGetVersion
func nvlsGoGetVersion(v *C.int) C.ncclResult_t {
	if v == nil {
		return nilArg("ncclGetVersion", "version")
	}
	*v = Version
	return C.ncclSuccess
}

//export nvlsGoGetUniqueId
func nvlsGoGetUniqueId(out *C.ncclUniqueId) C.ncclResult_t {
	if out == nil {
		return nilArg("ncclGetUniqueId", "uniqueId")
	}
	id, err := getUniqueID()
	if err != nil {
		return ret(err)
	}
	C.memcpy(unsafe.Pointer(out), unsafe.Pointer(&id[0]), C.size_t(len(id)))
	return C.ncclSuccess
}

func goID(id *C.ncclUniqueId) sock.ID {
	var g sock.ID
	C.memcpy(unsafe.Pointer(&g[0]), unsafe.Pointer(id), C.size_t(len(g)))
	return g
}

//export nvlsGoCommInitRank
func nvlsGoCommInitRank(comm *C.ncclComm_t, nranks C.int, id C.ncclUniqueId, rank C.int) C.ncclResult_t {
	return commInitRank(comm, nranks, &id, rank, config{blocking: true})
}

//export nvlsGoCommInitRankConfig
func nvlsGoCommInitRankConfig(comm *C.ncclComm_t, nranks C.int, id C.ncclUniqueId, rank C.int, cfg *C.ncclConfig_t) C.ncclResult_t {
	c, err := readConfig(cfg)
	if err != nil {
		return ret(err)
	}
	return commInitRank(comm, nranks, &id, rank, c)
}

// nvlsGoCommInitRankScalable: ncclCommInitRankScalable is ncclCommInitRankConfig with nID unique ids
// (NCCL spreads its bootstrap over them; every rank passes the same list):
// nvls meets on the first, which one of the ranks made. PyTorch inits
// this way.
//
//export nvlsGoCommInitRankScalable
func nvlsGoCommInitRankScalable(comm *C.ncclComm_t, nranks C.int, rank C.int, nID C.int, ids *C.ncclUniqueId, cfg *C.ncclConfig_t) C.ncclResult_t {
	if ids == nil || nID < 1 {
		return ret(fail(nccl.InvalidArgument, "libnccl-nvls: ncclCommInitRankScalable: %d unique ids at %p: want at least one", int(nID), ids))
	}
	c, err := readConfig(cfg)
	if err != nil {
		return ret(err)
	}
	return commInitRank(comm, nranks, ids, rank, c)
}

func commInitRank(comm *C.ncclComm_t, nranks C.int, id *C.ncclUniqueId, rank C.int, cfg config) C.ncclResult_t {
	if comm == nil {
		return nilArg("ncclCommInitRank", "comm")
	}
	c, err := initRank(int(nranks), goID(id), int(rank), cfg)
	if err != nil {
		return ret(err)
	}
	*comm = C.ncclComm_t(c.handle)
	if !cfg.blocking {
		return C.ncclInProgress
	}
	return C.ncclSuccess
}

// configMagic is NCCL_API_MAGIC.
const configMagic = 0xcafebeef

// readConfig checks an ncclConfig_t's header before reading a field: a
// struct of another NCCL version has another layout.
func readConfig(cfg *C.ncclConfig_t) (config, error) {
	out := config{blocking: true}
	if cfg == nil {
		return out, nil
	}
	// The header (size, magic, version) has one layout in every version.
	if uint32(cfg.magic) != configMagic {
		return out, fail(nccl.InvalidArgument, "libnccl-nvls: ncclConfig_t: magic %#x, not NCCL_API_MAGIC %#x: initialize it with NCCL_CONFIG_INITIALIZER", uint32(cfg.magic), configMagic)
	}
	want := uint64(unsafe.Sizeof(C.ncclConfig_t{}))
	if v := int(cfg.version); v/100 != Version/100 || uint64(cfg.size) != want {
		return out, fail(nccl.InvalidArgument, "libnccl-nvls: ncclConfig_t of NCCL %s (%d bytes): this libnccl-nvls follows NCCL %s's nccl.h, whose ncclConfig_t has another layout (%d bytes): rebuild the program against NCCL 2.28's nccl.h, or pass no config (ncclCommInitRank)",
			nccl.VersionString(v), uint64(cfg.size), nccl.VersionString(Version), want)
	}
	switch b := int(cfg.blocking); b {
	case 0:
		out.blocking = false
	case 1, int(C.NCCL_CONFIG_UNDEF_INT):
	default:
		return out, fail(nccl.InvalidArgument, "libnccl-nvls: ncclConfig_t.blocking is %d: 0 or 1", b)
	}
	return out, nil
}

//export nvlsGoCommInitAll
func nvlsGoCommInitAll(comm *C.ncclComm_t, ndev C.int, devlist *C.int) C.ncclResult_t {
	if comm == nil {
		return nilArg("ncclCommInitAll", "comm")
	}
	if ndev < 1 {
		return ret(fail(nccl.InvalidArgument, "libnccl-nvls: ncclCommInitAll: ndev %d", int(ndev)))
	}
	devs := make([]int, int(ndev))
	for i := range devs {
		devs[i] = i
		if devlist != nil {
			devs[i] = int(unsafe.Slice(devlist, int(ndev))[i])
		}
	}
	rcs, err := initAll(devs)
	if err != nil {
		return ret(err)
	}
	out := unsafe.Slice(comm, int(ndev))
	for i, rc := range rcs {
		out[i] = C.ncclComm_t(rc.handle)
	}
	return C.ncclSuccess
}

func commOf(fn string, comm C.ncclComm_t) (*rankComm, C.ncclResult_t) {
	rc, err := lookup(unsafe.Pointer(comm))
	if err != nil {
		return nil, ret(fmt.Errorf("%s: %w", fn, err))
	}
	return rc, C.ncclSuccess
}

//export nvlsGoCommFinalize
func nvlsGoCommFinalize(comm C.ncclComm_t) C.ncclResult_t {
	rc, r := commOf("ncclCommFinalize", comm)
	if rc == nil {
		return r
	}
	return ret(rc.finalize())
}

//export nvlsGoCommDestroy
func nvlsGoCommDestroy(comm C.ncclComm_t) C.ncclResult_t {
	rc, r := commOf("ncclCommDestroy", comm)
	if rc == nil {
		return r
	}
	return ret(rc.destroy(false))
}

//export nvlsGoCommAbort
func nvlsGoCommAbort(comm C.ncclComm_t) C.ncclResult_t {
	rc, r := commOf("ncclCommAbort", comm)
	if rc == nil {
		return r
	}
	return ret(rc.destroy(true))
}

var errStrings = sync.OnceValue(func() map[nccl.Result]*C.char {
	m := map[nccl.Result]*C.char{}
	for r, s := range map[nccl.Result]string{
		nccl.Success:            "no error",
		nccl.UnhandledCudaError: "unhandled cuda error (run with NCCL_DEBUG=INFO for details)",
		nccl.SystemError:        "unhandled system error (run with NCCL_DEBUG=INFO for details)",
		nccl.InternalError:      "internal error - please report this issue to the NCCL developers",
		nccl.InvalidArgument:    "invalid argument (run with NCCL_DEBUG=WARN for details)",
		nccl.InvalidUsage:       "invalid usage (run with NCCL_DEBUG=WARN for details)",
		nccl.RemoteError:        "remote process exited or there was a network error",
		nccl.InProgress:         "NCCL operation in progress",
	} {
		m[r] = C.CString(s + " [libnccl-nvls: NVLS_DEBUG=INFO, ncclGetLastError]")
	}
	m[-1] = C.CString("unknown result code")
	return m
})

//export nvlsGoGetErrorString
func nvlsGoGetErrorString(r C.ncclResult_t) *C.char {
	if s, ok := errStrings()[nccl.Result(r)]; ok {
		return s
	}
	return errStrings()[-1]
}

//export nvlsGoGetLastError
func nvlsGoGetLastError(comm C.ncclComm_t) *C.char {
	return C.nvls_last_error()
}

//export nvlsGoCommGetAsyncError
func nvlsGoCommGetAsyncError(comm C.ncclComm_t, out *C.ncclResult_t) C.ncclResult_t {
	rc, r := commOf("ncclCommGetAsyncError", comm)
	if rc == nil {
		return r
	}
	if out == nil {
		return nilArg("ncclCommGetAsyncError", "asyncError")
	}
	code, err := rc.asyncError()
	if err != nil {
		ret(err)
	}
	*out = C.ncclResult_t(code)
	return C.ncclSuccess
}

// commInfo answers the ncclComm* queries, once the comm is ready.
func commInfo(fn string, comm C.ncclComm_t, out *C.int, get func(*rankComm) int) C.ncclResult_t {
	rc, r := commOf(fn, comm)
	if rc == nil {
		return r
	}
	if out == nil {
		return nilArg(fn, "output")
	}
	*out = C.int(get(rc))
	return C.ncclSuccess
}

//export nvlsGoCommCount
func nvlsGoCommCount(comm C.ncclComm_t, count *C.int) C.ncclResult_t {
	return commInfo("ncclCommCount", comm, count, func(c *rankComm) int { return c.nranks })
}

//export nvlsGoCommCuDevice
func nvlsGoCommCuDevice(comm C.ncclComm_t, dev *C.int) C.ncclResult_t {
	return commInfo("ncclCommCuDevice", comm, dev, func(c *rankComm) int { return int(c.dev) })
}

//export nvlsGoCommUserRank
func nvlsGoCommUserRank(comm C.ncclComm_t, rank *C.int) C.ncclResult_t {
	return commInfo("ncclCommUserRank", comm, rank, func(c *rankComm) int { return c.rank })
}

//export nvlsGoMemAlloc
func nvlsGoMemAlloc(ptr *unsafe.Pointer, size C.size_t) C.ncclResult_t {
	if ptr == nil {
		return nilArg("ncclMemAlloc", "ptr")
	}
	p, err := memAlloc(uint64(size))
	if err != nil {
		return ret(err)
	}
	*(*uintptr)(unsafe.Pointer(ptr)) = uintptr(p)
	return C.ncclSuccess
}

//export nvlsGoMemFree
func nvlsGoMemFree(ptr unsafe.Pointer) C.ncclResult_t {
	if ptr == nil {
		return C.ncclSuccess
	}
	return ret(memFree(cuda.DevicePtr(uintptr(ptr))))
}

// registerBuf records a buffer registered with comm (team memory needs
// nothing more; other memory is copied through the workspace).
func registerBuf(fn string, comm C.ncclComm_t, buff unsafe.Pointer, size C.size_t) (*rankComm, C.ncclResult_t) {
	rc, r := commOf(fn, comm)
	if rc == nil {
		return nil, r
	}
	rc.mu.Lock()
	defer rc.mu.Unlock()
	if rc.regs == nil {
		rc.regs = map[uintptr]uint64{}
	}
	rc.regs[uintptr(buff)] = uint64(size)
	return rc, C.ncclSuccess
}

func deregisterBuf(fn string, comm C.ncclComm_t, buff uintptr) C.ncclResult_t {
	rc, r := commOf(fn, comm)
	if rc == nil {
		return r
	}
	rc.mu.Lock()
	defer rc.mu.Unlock()
	if _, ok := rc.regs[buff]; !ok {
		return ret(fail(nccl.InvalidArgument, "libnccl-nvls: %s: %#x was not registered with this communicator", fn, buff))
	}
	delete(rc.regs, buff)
	return C.ncclSuccess
}

//export nvlsGoCommRegister
func nvlsGoCommRegister(comm C.ncclComm_t, buff unsafe.Pointer, size C.size_t, handle *unsafe.Pointer) C.ncclResult_t {
	if handle == nil {
		return nilArg("ncclCommRegister", "handle")
	}
	rc, r := registerBuf("ncclCommRegister", comm, buff, size)
	if rc != nil {
		*handle = buff
	}
	return r
}

//export nvlsGoCommDeregister
func nvlsGoCommDeregister(comm C.ncclComm_t, handle unsafe.Pointer) C.ncclResult_t {
	return deregisterBuf("ncclCommDeregister", comm, uintptr(handle))
}

//export nvlsGoCommWindowRegister
func nvlsGoCommWindowRegister(comm C.ncclComm_t, buff unsafe.Pointer, size C.size_t, win *C.ncclWindow_t, flags C.int) C.ncclResult_t {
	if win == nil {
		return nilArg("ncclCommWindowRegister", "win")
	}
	rc, r := registerBuf("ncclCommWindowRegister", comm, buff, size)
	if rc != nil {
		*win = C.ncclWindow_t(buff)
	}
	return r
}

//export nvlsGoCommWindowDeregister
func nvlsGoCommWindowDeregister(comm C.ncclComm_t, win C.ncclWindow_t) C.ncclResult_t {
	return deregisterBuf("ncclCommWindowDeregister", comm, uintptr(unsafe.Pointer(win)))
}

//export nvlsGoGroupStart
func nvlsGoGroupStart() C.ncclResult_t { return ret(groupStart()) }

//export nvlsGoGroupEnd
func nvlsGoGroupEnd() C.ncclResult_t { return ret(groupEnd()) }

//export nvlsGoGroupSimulateEnd
func nvlsGoGroupSimulateEnd(si *C.ncclSimInfo_t) C.ncclResult_t { return ret(groupSimulateEnd(si)) }

// nvlsGoResetDebugInit: ncclResetDebugInit re-reads the debug settings:
// the real NCCL's, and NVLS_DEBUG from the C environment (a program sets
// them with setenv, which Go's copy of the environment does not see).
//
//export nvlsGoResetDebugInit
func nvlsGoResetDebugInit() {
	if loadReal() {
		C.fwd_ResetDebugInit()
	}
	shim.level.Set(debugLevel(cEnv))
}

// cEnv reads the C environment.
func cEnv(name string) (string, bool) {
	cs := C.CString(name)
	defer C.free(unsafe.Pointer(cs))
	v := C.getenv(cs)
	if v == nil {
		return "", false
	}
	return C.GoString(v), true
}

// coll runs a collective call on comm.
func coll(comm C.ncclComm_t, c *call) C.ncclResult_t {
	rc, r := commOf(c.kind.String(), comm)
	if rc == nil {
		return r
	}
	c.send, c.recv, c.stream = cuda.DevicePtr(uintptr(c.sendp)), cuda.DevicePtr(uintptr(c.recvp)), cuda.Stream(uintptr(c.streamp))
	return ret(rc.collective(c))
}

//export nvlsGoAllReduce
func nvlsGoAllReduce(send, recv unsafe.Pointer, count C.size_t, dt C.ncclDataType_t, op C.ncclRedOp_t, comm C.ncclComm_t, stream C.cudaStream_t) C.ncclResult_t {
	return coll(comm, &call{kind: kAllReduce, sendp: send, recvp: recv, streamp: unsafe.Pointer(stream), count: uint64(count), dt: nccl.DataType(dt), op: nccl.RedOp(op)})
}

//export nvlsGoBroadcast
func nvlsGoBroadcast(send, recv unsafe.Pointer, count C.size_t, dt C.ncclDataType_t, root C.int, comm C.ncclComm_t, stream C.cudaStream_t) C.ncclResult_t {
	return coll(comm, &call{kind: kBroadcast, sendp: send, recvp: recv, streamp: unsafe.Pointer(stream), count: uint64(count), dt: nccl.DataType(dt), root: int(root)})
}

//export nvlsGoBcast
func nvlsGoBcast(buff unsafe.Pointer, count C.size_t, dt C.ncclDataType_t, root C.int, comm C.ncclComm_t, stream C.cudaStream_t) C.ncclResult_t {
	return nvlsGoBroadcast(buff, buff, count, dt, root, comm, stream)
}

//export nvlsGoReduce
func nvlsGoReduce(send, recv unsafe.Pointer, count C.size_t, dt C.ncclDataType_t, op C.ncclRedOp_t, root C.int, comm C.ncclComm_t, stream C.cudaStream_t) C.ncclResult_t {
	return coll(comm, &call{kind: kReduce, sendp: send, recvp: recv, streamp: unsafe.Pointer(stream), count: uint64(count), dt: nccl.DataType(dt), op: nccl.RedOp(op), root: int(root)})
}

//export nvlsGoAllGather
func nvlsGoAllGather(send, recv unsafe.Pointer, count C.size_t, dt C.ncclDataType_t, comm C.ncclComm_t, stream C.cudaStream_t) C.ncclResult_t {
	return coll(comm, &call{kind: kAllGather, sendp: send, recvp: recv, streamp: unsafe.Pointer(stream), count: uint64(count), dt: nccl.DataType(dt)})
}

//export nvlsGoReduceScatter
func nvlsGoReduceScatter(send, recv unsafe.Pointer, count C.size_t, dt C.ncclDataType_t, op C.ncclRedOp_t, comm C.ncclComm_t, stream C.cudaStream_t) C.ncclResult_t {
	return coll(comm, &call{kind: kReduceScatter, sendp: send, recvp: recv, streamp: unsafe.Pointer(stream), count: uint64(count), dt: nccl.DataType(dt), op: nccl.RedOp(op)})
}

// forwardOnly runs fn, a call nvls never runs, on the real NCCL.
func forwardOnly(name string, comm C.ncclComm_t, fn func(real C.ncclComm_t) C.ncclResult_t) C.ncclResult_t {
	rc, r := commOf(name, comm)
	if rc == nil {
		return r
	}
	if err := rc.waitReady(); err != nil {
		return ret(err)
	}
	if err := rc.forwardable(name, "nvls does not run it"); err != nil {
		return ret(err)
	}
	return ret(realResult(name, fn(C.ncclComm_t(rc.real))))
}

//export nvlsGoSend
func nvlsGoSend(send unsafe.Pointer, count C.size_t, dt C.ncclDataType_t, peer C.int, comm C.ncclComm_t, stream C.cudaStream_t) C.ncclResult_t {
	return forwardOnly("ncclSend", comm, func(r C.ncclComm_t) C.ncclResult_t { return C.fwd_Send(send, count, dt, peer, r, stream) })
}

//export nvlsGoRecv
func nvlsGoRecv(recv unsafe.Pointer, count C.size_t, dt C.ncclDataType_t, peer C.int, comm C.ncclComm_t, stream C.cudaStream_t) C.ncclResult_t {
	return forwardOnly("ncclRecv", comm, func(r C.ncclComm_t) C.ncclResult_t { return C.fwd_Recv(recv, count, dt, peer, r, stream) })
}

//export nvlsGoAlltoAll
func nvlsGoAlltoAll(send, recv unsafe.Pointer, count C.size_t, dt C.ncclDataType_t, comm C.ncclComm_t, stream C.cudaStream_t) C.ncclResult_t {
	return forwardOnly("ncclAlltoAll", comm, func(r C.ncclComm_t) C.ncclResult_t { return C.fwd_AlltoAll(send, recv, count, dt, r, stream) })
}

//export nvlsGoGather
func nvlsGoGather(send, recv unsafe.Pointer, count C.size_t, dt C.ncclDataType_t, root C.int, comm C.ncclComm_t, stream C.cudaStream_t) C.ncclResult_t {
	return forwardOnly("ncclGather", comm, func(r C.ncclComm_t) C.ncclResult_t { return C.fwd_Gather(send, recv, count, dt, root, r, stream) })
}

//export nvlsGoScatter
func nvlsGoScatter(send, recv unsafe.Pointer, count C.size_t, dt C.ncclDataType_t, root C.int, comm C.ncclComm_t, stream C.cudaStream_t) C.ncclResult_t {
	return forwardOnly("ncclScatter", comm, func(r C.ncclComm_t) C.ncclResult_t { return C.fwd_Scatter(send, recv, count, dt, root, r, stream) })
}

//export nvlsGoRedOpCreatePreMulSum
func nvlsGoRedOpCreatePreMulSum(op *C.ncclRedOp_t, scalar unsafe.Pointer, dt C.ncclDataType_t, res C.ncclScalarResidence_t, comm C.ncclComm_t) C.ncclResult_t {
	return forwardOnly("ncclRedOpCreatePreMulSum", comm, func(r C.ncclComm_t) C.ncclResult_t {
		return C.fwd_RedOpCreatePreMulSum(op, scalar, dt, res, r)
	})
}

//export nvlsGoRedOpDestroy
func nvlsGoRedOpDestroy(op C.ncclRedOp_t, comm C.ncclComm_t) C.ncclResult_t {
	return forwardOnly("ncclRedOpDestroy", comm, func(r C.ncclComm_t) C.ncclResult_t { return C.fwd_RedOpDestroy(op, r) })
}

// nvlsGoCommSplit: ncclCommSplit's new communicator is the real NCCL's alone: nvls does
// not split teams, so every call on it is the real NCCL's too.
//
//export nvlsGoCommSplit
func nvlsGoCommSplit(comm C.ncclComm_t, color, key C.int, newcomm *C.ncclComm_t, cfg *C.ncclConfig_t) C.ncclResult_t {
	if newcomm == nil {
		return nilArg("ncclCommSplit", "newcomm")
	}
	if _, err := readConfig(cfg); err != nil {
		return ret(err)
	}
	return forwardOnly("ncclCommSplit", comm, func(r C.ncclComm_t) C.ncclResult_t {
		var nc C.ncclComm_t
		res := C.fwd_CommSplit(r, color, key, &nc, cfg)
		if res == C.ncclSuccess && nc != nil {
			*newcomm = wrapRealComm(unsafe.Pointer(nc))
		} else {
			*newcomm = nil
		}
		return res
	})
}

// nvlsGoCommShrink: ncclCommShrink's new communicator is the real NCCL's alone, as
// ncclCommSplit's.
//
//export nvlsGoCommShrink
func nvlsGoCommShrink(comm C.ncclComm_t, excl *C.int, nexcl C.int, newcomm *C.ncclComm_t, cfg *C.ncclConfig_t, flags C.int) C.ncclResult_t {
	if newcomm == nil {
		return nilArg("ncclCommShrink", "newcomm")
	}
	if _, err := readConfig(cfg); err != nil {
		return ret(err)
	}
	return forwardOnly("ncclCommShrink", comm, func(r C.ncclComm_t) C.ncclResult_t {
		var nc C.ncclComm_t
		res := C.fwd_CommShrink(r, excl, nexcl, &nc, cfg, flags)
		if res == C.ncclSuccess && nc != nil {
			*newcomm = wrapRealComm(unsafe.Pointer(nc))
		} else {
			*newcomm = nil
		}
		return res
	})
}

// wrapRealComm gives the real NCCL's communicator c a handle of the
// shim's, on which every call is forwarded.
func wrapRealComm(c unsafe.Pointer) C.ncclComm_t {
	rc := &rankComm{handle: allocHandle(), real: c, rank: -1, dev: -1, blocking: true, ready: make(chan struct{})}
	close(rc.ready)
	var v C.int
	if C.fwd_CommCount(C.ncclComm_t(c), &v) == C.ncclSuccess {
		rc.nranks = int(v)
	}
	if C.fwd_CommUserRank(C.ncclComm_t(c), &v) == C.ncclSuccess {
		rc.rank = int(v)
	}
	if C.fwd_CommCuDevice(C.ncclComm_t(c), &v) == C.ncclSuccess {
		rc.dev = cuda.Device(v)
	}
	register(rc)
	return C.ncclComm_t(rc.handle)
}
