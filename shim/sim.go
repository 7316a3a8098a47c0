//go:build cgo && nvlssim

package main

/*
#include "forward.h"
*/
import "C"

import (
	"fmt"
	"sync"
	"unsafe"

	"github.com/nvls-go/nvls/cuda"
	"github.com/nvls-go/nvls/cuda/sim"
	"github.com/nvls-go/nvls/internal/env"
	"github.com/nvls-go/nvls/simnode"
)

// EnvSimDevices is the simulated node's device count (default 4).
const EnvSimDevices = env.SimDevices

var simNode *sim.Node

// openSim makes the process's simulated node.
func openSim() (cuda.Driver, error) {
	n, set, err := env.OS.Int(EnvSimDevices, 1, 8)
	if err != nil {
		return nil, err
	}
	if !set {
		n = 4
	}
	simNode = simnode.New(simnode.Config{Devices: n})
	return simNode, nil
}

// The nvlsSim* exports stand in for the CUDA runtime in the C tests:
// they act on the simulated node, in the calling thread's current
// context, and return 0 or -1 (the error goes to ncclGetLastError).

var simMu sync.Mutex

func simRet(err error) C.int {
	if err != nil {
		ret(fmt.Errorf("nvlsSim: %w", err))
		return -1
	}
	return 0
}

//export nvlsSimSetDevice
func nvlsSimSetDevice(dev C.int) C.int {
	d, err := driver()
	if err != nil {
		return simRet(err)
	}
	pc, err := d.PrimaryCtxRetain(cuda.Device(dev))
	if err != nil {
		return simRet(err)
	}
	return simRet(d.CtxSetCurrent(pc))
}

//export nvlsSimMalloc
func nvlsSimMalloc(p *unsafe.Pointer, n C.size_t) C.int {
	d, err := driver()
	if err != nil {
		return simRet(err)
	}
	dp, err := d.MemAlloc(uint64(n))
	if err != nil {
		return simRet(err)
	}
	*(*uintptr)(unsafe.Pointer(p)) = uintptr(dp)
	return 0
}

//export nvlsSimFree
func nvlsSimFree(p unsafe.Pointer) C.int {
	d, err := driver()
	if err != nil {
		return simRet(err)
	}
	return simRet(d.MemFree(cuda.DevicePtr(uintptr(p))))
}

//export nvlsSimMemcpyHtoD
func nvlsSimMemcpyHtoD(dst, src unsafe.Pointer, n C.size_t) C.int {
	d, err := driver()
	if err != nil {
		return simRet(err)
	}
	return simRet(d.MemcpyHtoD(cuda.DevicePtr(uintptr(dst)), src, uint64(n)))
}

//export nvlsSimMemcpyDtoH
func nvlsSimMemcpyDtoH(dst, src unsafe.Pointer, n C.size_t) C.int {
	d, err := driver()
	if err != nil {
		return simRet(err)
	}
	return simRet(d.MemcpyDtoH(dst, cuda.DevicePtr(uintptr(src)), uint64(n)))
}

//export nvlsSimStreamCreate
func nvlsSimStreamCreate(s *C.cudaStream_t) C.int {
	d, err := driver()
	if err != nil {
		return simRet(err)
	}
	st, err := d.StreamCreate(cuda.StreamNonBlocking)
	if err != nil {
		return simRet(err)
	}
	*(*uintptr)(unsafe.Pointer(s)) = uintptr(st)
	return 0
}

//export nvlsSimStreamSynchronize
func nvlsSimStreamSynchronize(s C.cudaStream_t) C.int {
	d, err := driver()
	if err != nil {
		return simRet(err)
	}
	return simRet(d.StreamSynchronize(cuda.Stream(uintptr(unsafe.Pointer(s)))))
}

//export nvlsSimStreamDestroy
func nvlsSimStreamDestroy(s C.cudaStream_t) C.int {
	d, err := driver()
	if err != nil {
		return simRet(err)
	}
	return simRet(d.StreamDestroy(cuda.Stream(uintptr(unsafe.Pointer(s)))))
}

//export nvlsSimCheckNoLeaks
func nvlsSimCheckNoLeaks() C.int {
	if simNode == nil {
		return 0
	}
	return simRet(simNode.CheckNoLeaks())
}
