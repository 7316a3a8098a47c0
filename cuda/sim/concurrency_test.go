package sim

import (
	"encoding/binary"
	"fmt"
	"runtime"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/nvls-go/nvls/cuda"
)

// TestConcurrentDevices drives eight devices from eight goroutines at
// once: each adds to a shared counter with kernels on its own stream while
// it creates, maps and frees memory of its own.
func TestConcurrentDevices(t *testing.T) {
	const devs, launches = 8, 50
	n := newNode(t, Config{Devices: devs})
	shared := mapOn(t, n, 0, 2*mib)
	var all []cuda.AccessDesc
	for d := 0; d < devs; d++ {
		all = append(all, cuda.AccessDesc{Location: cuda.DeviceLocation(cuda.Device(d)), Flags: cuda.AccessReadWrite})
	}
	require.NoError(t, n.MemSetAccess(shared.ptr, shared.size, all))
	deltas := randBytes(t, 4*devs)
	var want uint32
	for d := 0; d < devs; d++ {
		want += launches * (binary.LittleEndian.Uint32(deltas[4*d:]) % 1000)
	}

	errs := make(chan error, devs)
	var wg sync.WaitGroup
	for d := 0; d < devs; d++ {
		wg.Add(1)
		go func(dev cuda.Device) {
			defer wg.Done()
			runtime.LockOSThread()
			defer runtime.UnlockOSThread()
			errs <- func() error {
				ctx, err := n.PrimaryCtxRetain(dev)
				if err != nil {
					return err
				}
				defer n.PrimaryCtxRelease(dev)
				if err := n.CtxSetCurrent(ctx); err != nil {
					return err
				}
				defer n.CtxSetCurrent(0)
				m, err := n.ModuleLoadData([]byte(testPTX))
				if err != nil {
					return err
				}
				defer n.ModuleUnload(m)
				add, err := n.ModuleGetFunction(m, "simtest_add")
				if err != nil {
					return err
				}
				s, err := n.StreamCreate(cuda.StreamNonBlocking)
				if err != nil {
					return err
				}
				defer n.StreamDestroy(s)
				p := params(uint64(shared.ptr), uint64(binary.LittleEndian.Uint32(deltas[4*dev:])%1000))
				for i := 0; i < launches; i++ {
					if err := n.LaunchKernel(add, cuda.D1(1), cuda.D1(1), 0, s, ptr(p), 16); err != nil {
						return err
					}
					// Some VMM traffic of its own meanwhile.
					prop := cuda.DeviceAllocationProp(dev, cuda.HandleNone)
					h, err := n.MemCreate(2*mib, &prop)
					if err != nil {
						return err
					}
					va, err := n.MemAddressReserve(2*mib, 0, 0)
					if err != nil {
						return err
					}
					if err := n.MemMap(va, 2*mib, 0, h); err != nil {
						return err
					}
					if err := n.MemSetAccess(va, 2*mib, all[dev:dev+1]); err != nil {
						return err
					}
					data := randBytes(t, 256)
					if err := n.MemcpyHtoDAsync(va+4096, ptr(data), 256, s); err != nil {
						return err
					}
					back := make([]byte, 256)
					if err := n.MemcpyDtoHAsync(ptr(back), va+4096, 256, s); err != nil {
						return err
					}
					if err := n.StreamSynchronize(s); err != nil {
						return err
					}
					if string(back) != string(data) {
						return fmt.Errorf("device %d: copy back differs", dev)
					}
					if err := n.MemUnmap(va, 2*mib); err != nil {
						return err
					}
					if err := n.MemAddressFree(va, 2*mib); err != nil {
						return err
					}
					if err := n.MemRelease(h); err != nil {
						return err
					}
				}
				return n.StreamSynchronize(s)
			}()
		}(cuda.Device(d))
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		require.NoError(t, err)
	}
	v, err := n.Memory(0).LoadU32(shared.ptr)
	require.NoError(t, err)
	require.Equal(t, want, v)
	shared.free(t, n)
	require.NoError(t, n.CheckNoLeaks())
}
