package main

/*
#cgo LDFLAGS: -ldl
#include <stdlib.h>
#include <string.h>
#include "forward.h"
*/
import "C"

import (
	"context"
	"fmt"
	"runtime"
	"sync"
	"unsafe"

	"github.com/nvls-go/nvls/cuda"
	"github.com/nvls-go/nvls/internal/env"
	"github.com/nvls-go/nvls/nccl"
)

// real is the real NCCL, loaded once on first need.
var real struct {
	once sync.Once
	ok   bool
	path string
	why  string // why it is not loaded
}

// loadReal loads the real NCCL: NVLS_REAL_NCCL, else libnccl.so.2 on
// the loader path; never the shim (forward.c checks).
func loadReal() bool {
	real.once.Do(func() {
		path, set := env.OS.String(EnvRealNCCL)
		if !set {
			path = nccl.LibName
		}
		cpath := C.CString(path)
		defer C.free(unsafe.Pointer(cpath))
		var buf [1024]C.char
		if C.fwd_open(cpath, &buf[0], C.int(len(buf))) != 0 {
			real.why = C.GoString(&buf[0])
			if !set {
				real.why += " (set " + EnvRealNCCL + " to the real NCCL's path)"
			}
			shim.log.Info("libnccl-nvls: no real NCCL to forward to", "why", real.why)
			return
		}
		real.ok, real.path = true, C.GoString(C.fwd_path())
		var v C.int
		C.fwd_GetVersion(&v)
		shim.log.Info("libnccl-nvls: forwarding to the real NCCL", "path", real.path, "version", nccl.VersionString(int(v)))
	})
	return real.ok
}

func realDescr(have bool) string {
	if have {
		return real.path
	}
	if real.why == "" {
		return "none"
	}
	return "none: " + real.why
}

// onDevice runs fn on this goroutine's thread with dev's primary context
// current (the real NCCL reads the runtime's current device from it).
func onDevice(dev cuda.Device, fn func()) {
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	d, err := driver()
	if err == nil {
		prev, _ := d.CtxGetCurrent()
		if pc, err := d.PrimaryCtxRetain(dev); err == nil {
			_ = d.CtxSetCurrent(pc)
			defer func() {
				_ = d.CtxSetCurrent(prev)
				_ = d.PrimaryCtxRelease(dev)
			}()
		}
	}
	fn()
}

// realInitRank makes the real NCCL's communicator beside rank's nvls one:
// rank 0's real unique id goes to every rank through the job's bootstrap,
// and only where every rank has the real NCCL. It returns nil where there
// is none (forwarded calls then fail, saying why).
func realInitRank(j *job) unsafe.Pointer {
	rc := j.ranks[0]
	msg := make([]byte, 1+C.NCCL_UNIQUE_ID_BYTES)
	var id C.ncclUniqueId
	if loadReal() {
		msg[0] = 1
		if rc.rank == 0 {
			if r := C.fwd_GetUniqueId(&id); r != C.ncclSuccess {
				msg[0] = 0
				real.why = fmt.Sprintf("the real ncclGetUniqueId failed: %v", nccl.Result(r))
			}
			copy(msg[1:], C.GoBytes(unsafe.Pointer(&id), C.NCCL_UNIQUE_ID_BYTES))
		}
	}
	ctx, cancel, _, err := setupContext()
	if err != nil {
		return nil
	}
	defer cancel()
	all, err := j.boot.AllGather(ctx, msg)
	if err != nil {
		shim.log.Warn("libnccl-nvls: no real NCCL communicator", "rank", rc.rank, "err", err)
		return nil
	}
	for r, m := range all {
		if len(m) != len(msg) || m[0] == 0 {
			if real.ok {
				shim.log.Warn("libnccl-nvls: no real NCCL communicator: a rank has no real NCCL", "rank", rc.rank, "without", r)
			}
			return nil
		}
	}
	C.memcpy(unsafe.Pointer(&id), unsafe.Pointer(&all[0][1]), C.NCCL_UNIQUE_ID_BYTES)
	var comm C.ncclComm_t
	var res C.ncclResult_t
	onDevice(rc.dev, func() { res = C.fwd_CommInitRank(&comm, C.int(rc.nranks), &id, C.int(rc.rank)) })
	if res != C.ncclSuccess {
		shim.log.Warn("libnccl-nvls: the real ncclCommInitRank failed: forwarded calls will fail", "rank", rc.rank, "result", nccl.Result(res))
		return nil
	}
	return unsafe.Pointer(comm)
}

// realInitAll makes the real NCCL's communicators for devs (nil ones
// where there is no real NCCL).
func realInitAll(devs []int) []unsafe.Pointer {
	out := make([]unsafe.Pointer, len(devs))
	if !loadReal() {
		return out
	}
	comms := (*[1 << 20]C.ncclComm_t)(C.malloc(C.size_t(len(devs)) * C.size_t(unsafe.Sizeof(C.ncclComm_t(nil)))))[:len(devs):len(devs)]
	defer C.free(unsafe.Pointer(&comms[0]))
	cdevs := (*[1 << 20]C.int)(C.malloc(C.size_t(len(devs)) * C.size_t(unsafe.Sizeof(C.int(0)))))[:len(devs):len(devs)]
	defer C.free(unsafe.Pointer(&cdevs[0]))
	for i, d := range devs {
		cdevs[i] = C.int(d)
	}
	if r := C.fwd_CommInitAll(&comms[0], C.int(len(devs)), &cdevs[0]); r != C.ncclSuccess {
		shim.log.Warn("libnccl-nvls: the real ncclCommInitAll failed: forwarded calls will fail", "result", nccl.Result(r))
		return out
	}
	for i := range out {
		out[i] = unsafe.Pointer(comms[i])
	}
	return out
}

func realFinalize(c unsafe.Pointer) { C.fwd_CommFinalize(C.ncclComm_t(c)) }

func realDestroy(c unsafe.Pointer, abort bool) {
	if abort {
		C.fwd_CommAbort(C.ncclComm_t(c))
		return
	}
	C.fwd_CommDestroy(C.ncclComm_t(c))
}

func realGroupStart() error {
	if !real.ok {
		return nil
	}
	return realResult("ncclGroupStart", C.fwd_GroupStart())
}

func realGroupEnd() error {
	if !real.ok {
		return nil
	}
	return realResult("ncclGroupEnd", C.fwd_GroupEnd())
}

// realResult turns the real NCCL's result into an error with its text.
func realResult(name string, r C.ncclResult_t) error {
	if r == C.ncclSuccess || r == C.ncclInProgress {
		return nil
	}
	msg := C.GoString(C.fwd_GetLastError(nil))
	return fail(nccl.Result(r), "libnccl-nvls: %s, forwarded to the real NCCL (%s), failed: %v: %s", name, real.path, nccl.Result(r), msg)
}

// forwardable checks that rc has a real communicator for name (why it
// is forwarded), and logs the forwarding.
func (rc *rankComm) forwardable(name, why string) error {
	rc.count(true, name+": "+why)
	if shim.log.Enabled(context.Background(), levelInfo) {
		shim.log.Info("libnccl-nvls: "+name+": forwarded", "rank", rc.rank, "why", why)
	}
	if rc.real == nil {
		if !real.ok && real.why == "" {
			loadReal()
		}
		return fail(nccl.InvalidUsage, "libnccl-nvls: %s is forwarded to the real NCCL (%s), and this communicator has none: %s", name, why, realDescr(false))
	}
	return nil
}

// forward runs a collective nvls does not run on the real NCCL.
func (rc *rankComm) forward(c *call, why string) error {
	name := c.kind.String()
	if err := rc.forwardable(name, why); err != nil {
		return err
	}
	comm, st := C.ncclComm_t(rc.real), C.cudaStream_t(c.streamp)
	n, dt, op, root := C.size_t(c.count), C.ncclDataType_t(c.dt), C.ncclRedOp_t(c.op), C.int(c.root)
	var r C.ncclResult_t
	switch c.kind {
	case kAllReduce:
		r = C.fwd_AllReduce(c.sendp, c.recvp, n, dt, op, comm, st)
	case kBroadcast:
		r = C.fwd_Broadcast(c.sendp, c.recvp, n, dt, root, comm, st)
	case kReduce:
		r = C.fwd_Reduce(c.sendp, c.recvp, n, dt, op, root, comm, st)
	case kAllGather:
		r = C.fwd_AllGather(c.sendp, c.recvp, n, dt, comm, st)
	case kReduceScatter:
		r = C.fwd_ReduceScatter(c.sendp, c.recvp, n, dt, op, comm, st)
	}
	return realResult(name, r)
}
