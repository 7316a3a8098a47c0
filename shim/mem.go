//go:build cgo

package main

import (
	"errors"

	"github.com/nvls-go/nvls/cuda"
	"github.com/nvls-go/nvls/nccl"
	"github.com/nvls-go/nvls/team"
)

// memBlock is memory ncclMemAlloc handed out: a team buffer (one
// allocation for every local rank of its job, handed out device by
// device), or plain device memory where no job is on the device or the
// team's workspace is full.
type memBlock struct {
	j     *job
	buf   team.Buffer
	local int
	out   []bool // team buffers: which local ranks' copies are handed out
}

// memAlloc is ncclMemAlloc on the current device.
func memAlloc(size uint64) (cuda.DevicePtr, error) {
	d, err := driver()
	if err != nil {
		return 0, err
	}
	dev, err := currentDevice(d)
	if err != nil {
		return 0, err
	}
	if p, ok := teamAlloc(dev, size); ok {
		return p, nil
	}
	p, err := d.MemAlloc(size)
	if err != nil {
		return 0, &callError{code: nccl.UnhandledCudaError, err: err}
	}
	shim.log.Info("libnccl-nvls: ncclMemAlloc: plain device memory (collectives on it are copied through the workspace)", "device", int(dev), "size", size)
	return p, nil
}

// teamAlloc hands out team memory of the newest job with a rank on dev:
// a copy of a block another local rank's call allocated (same size, not
// yet handed out on dev), else a new block.
func teamAlloc(dev cuda.Device, size uint64) (cuda.DevicePtr, bool) {
	shim.mu.Lock()
	defer shim.mu.Unlock()
	for i := len(shim.jobs) - 1; i >= 0; i-- {
		j := shim.jobs[i]
		l := -1
		for k := range j.t.NumLocal() {
			if j.t.Device(k) == dev {
				l = k
			}
		}
		if l < 0 {
			continue
		}
		for _, b := range shim.mem {
			if b.j == j && b.buf.Size() >= size && b.buf.Size() < size+16 && !b.out[l] {
				b.out[l] = true
				p := b.buf.Ptr(l)
				shim.mem[uintptr(p)] = &memBlock{j: j, buf: b.buf, local: l, out: b.out}
				return p, true
			}
		}
		buf, err := j.t.Alloc(size)
		if err != nil {
			shim.log.Info("libnccl-nvls: ncclMemAlloc: no team memory", "device", int(dev), "size", size, "err", err)
			return 0, false
		}
		out := make([]bool, j.t.NumLocal())
		out[l] = true
		p := buf.Ptr(l)
		shim.mem[uintptr(p)] = &memBlock{j: j, buf: buf, local: l, out: out}
		shim.log.Info("libnccl-nvls: ncclMemAlloc: team memory (collectives on it need no copy)", "device", int(dev), "size", size, "offset", buf.Offset())
		return p, true
	}
	return 0, false
}

// memFree is ncclMemFree: a team block goes back once every copy handed
// out is freed.
func memFree(p cuda.DevicePtr) error {
	shim.mu.Lock()
	b := shim.mem[uintptr(p)]
	if b != nil {
		delete(shim.mem, uintptr(p))
		b.out[b.local] = false
		var still bool
		for _, o := range b.out {
			still = still || o
		}
		last := false
		if !still && b.j.closing {
			last = true
			for _, o := range shim.mem {
				last = last && o.j != b.j
			}
		}
		shim.mu.Unlock()
		if still {
			return nil
		}
		err := b.j.t.Free(b.buf)
		if last {
			// The communicator was destroyed before its memory: the
			// team goes with the last of it.
			err = errors.Join(err, b.j.closeTeam())
		}
		if err != nil {
			return &callError{code: nccl.InvalidArgument, err: err}
		}
		return nil
	}
	shim.mu.Unlock()
	d, err := driver()
	if err != nil {
		return err
	}
	if err := d.MemFree(p); err != nil {
		return &callError{code: nccl.InvalidArgument, err: err}
	}
	return nil
}
