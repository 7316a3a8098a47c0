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

// simInfoMagic is NCCL_SIM_INFO_INITIALIZER's magic; simInfoSince the
// NCCL version whose ncclSimInfo_t (v22200) this nccl.h declares.
const (
	simInfoMagic = 0x74685283
	simInfoSince = 22200
)

// checkSimInfo checks an ncclSimInfo_t's header, as readConfig does an
// ncclConfig_t's (NCCL itself checks the magic).
func checkSimInfo(si *C.ncclSimInfo_t) error {
	if uint32(si.magic) != simInfoMagic {
		return fail(nccl.InvalidArgument, "libnccl-nvls: ncclGroupSimulateEnd: ncclSimInfo_t: magic %#x, not %#x: initialize it with NCCL_SIM_INFO_INITIALIZER", uint32(si.magic), simInfoMagic)
	}
	want := uint64(unsafe.Sizeof(C.ncclSimInfo_t{}))
	if v := int(si.version); v < simInfoSince || uint64(si.size) != want {
		return fail(nccl.InvalidArgument, "libnccl-nvls: ncclGroupSimulateEnd: ncclSimInfo_t of NCCL %s (%d bytes): this libnccl-nvls follows NCCL %s's nccl.h, whose ncclSimInfo_t (NCCL 2.22 on) has %d bytes",
			nccl.VersionString(v), uint64(si.size), nccl.VersionString(Version), want)
	}
	return nil
}

// groupSimulateEnd is ncclGroupSimulateEnd: it ends a nesting level as
// groupEnd does, but the outermost launches nothing. The group's calls
// that nvls runs go to the real NCCL instead, into its open group on
// each rank's real communicator, and the real ncclGroupSimulateEnd puts
// its estimate of the whole group into si. Where the group has such
// calls and no real NCCL (or no real communicator, or a real NCCL older
// than 2.22) can estimate them, they are dropped, si is left as it was
// and the result is ncclInvalidUsage, saying why. A NULL si ends the
// group as ncclGroupEnd does, as NCCL's does.
func groupSimulateEnd(si *C.ncclSimInfo_t) error {
	if si == nil {
		return groupEnd()
	}
	g, outer, err := popGroup()
	if err != nil {
		return err
	}
	if !outer {
		return realGroupEnd()
	}
	calls := g.calls
	g.calls = nil
	// Inits run as at ncclGroupEnd (so does NCCL's).
	ierr := g.waitInits()
	if err := checkSimInfo(si); err != nil {
		return firstErr(firstErr(err, ierr), realGroupDiscard())
	}
	if why := unestimated(calls); why != "" {
		err := fail(nccl.InvalidUsage, "libnccl-nvls: ncclGroupSimulateEnd: the group's %d call(s) that nvls runs are estimated by the real NCCL, and %s: none was run, and simInfo is unchanged", len(calls), why)
		return firstErr(firstErr(err, ierr), realGroupDiscard())
	}
	for _, d := range calls {
		err = firstErr(err, d.rc.forward(d.c, "ncclGroupSimulateEnd: the real NCCL estimates the group"))
	}
	if real.ok {
		err = firstErr(err, realResult("ncclGroupSimulateEnd", C.fwd_GroupSimulateEnd(si)))
	}
	return firstErr(ierr, err)
}

// unestimated says why the real NCCL cannot estimate calls ("" if it can).
func unestimated(calls []deferred) string {
	if len(calls) == 0 {
		return ""
	}
	if !real.ok {
		return "there is no real NCCL (" + realDescr(false) + ")"
	}
	if C.fwd_hasGroupSimulateEnd() == 0 {
		return "the real NCCL (" + real.path + ") has no ncclGroupSimulateEnd (it came in NCCL 2.22)"
	}
	for _, d := range calls {
		if d.rc.real == nil {
			return fmt.Sprintf("rank %d has no real NCCL communicator", d.rc.rank)
		}
	}
	return ""
}

// realGroupDiscard ends the real NCCL's group without launching it (its
// ncclGroupSimulateEnd): where it has none, by ncclGroupEnd, which does
// launch the group's forwarded calls, and says so.
func realGroupDiscard() error {
	if !real.ok {
		return nil
	}
	if C.fwd_hasGroupSimulateEnd() == 0 {
		return firstErr(realGroupEnd(), fail(nccl.InvalidUsage, "libnccl-nvls: ncclGroupSimulateEnd: the real NCCL (%s) has none: its group was ended by ncclGroupEnd, which ran the group's forwarded calls", real.path))
	}
	si := C.ncclSimInfo_t{size: C.size_t(unsafe.Sizeof(C.ncclSimInfo_t{})), magic: simInfoMagic, version: Version, estimatedTime: -1}
	return realResult("ncclGroupSimulateEnd", C.fwd_GroupSimulateEnd(&si))
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
