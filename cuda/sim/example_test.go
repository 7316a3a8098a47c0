package sim_test

import (
	"encoding/binary"
	"errors"
	"fmt"
	"runtime"
	"unsafe"

	"github.com/nvls-go/nvls/cuda"
	"github.com/nvls-go/nvls/cuda/sim"
)

// A two-GPU multicast team: create the object, add both devices, bind
// each device's memory, map the object and store through it.
func Example_multicast() {
	n := sim.New(sim.Config{Devices: 2})
	defer n.Close()
	must := func(err error) {
		if err != nil {
			panic(err)
		}
	}
	must(n.Init())
	const size = 2 << 20
	mc, err := n.MulticastCreate(&cuda.MulticastProp{NumDevices: 2, Size: size})
	must(err)
	must(n.MulticastAddDevice(mc, 0))
	must(n.MulticastAddDevice(mc, 1))
	var uc [2]cuda.DevicePtr
	for d := cuda.Device(0); d < 2; d++ {
		prop := cuda.DeviceAllocationProp(d, cuda.HandleNone)
		h, err := n.MemCreate(size, &prop)
		must(err)
		must(n.MulticastBindMem(mc, 0, h, 0, size))
		uc[d], err = n.MemAddressReserve(size, 0, 0)
		must(err)
		must(n.MemMap(uc[d], size, 0, h))
		must(n.MemRelease(h)) // the mapping and the bind keep the memory
	}
	va, err := n.MemAddressReserve(size, 0, 0)
	must(err)
	must(n.MemMap(va, size, 0, mc))
	must(n.MemSetAccess(va, size, []cuda.AccessDesc{{Location: cuda.DeviceLocation(0), Flags: cuda.AccessReadWrite}}))

	// Device 0 stores 16 bytes through the multicast alias...
	src := []byte("multicast hello!")
	must(n.Memory(0).MultimemStore(va+256, src))
	// ...and they land in both devices' memory.
	for d := 0; d < 2; d++ {
		got, err := n.ReadDevice(uc[d]+256, len(src))
		must(err)
		fmt.Printf("device %d: %s\n", d, got)
	}
	// A plain load of a multicast address is an illegal address.
	err = n.Memory(0).Load(va, make([]byte, 4))
	fmt.Println(errors.Is(err, cuda.ErrIllegalAddress))
	// Output:
	// device 0: multicast hello!
	// device 1: multicast hello!
	// true
}

// Fault injection: the second cuMemCreate fails; the call log says so.
func ExampleNode_FailAt() {
	n := sim.New(sim.Config{})
	defer n.Close()
	_ = n.Init()
	n.ResetCalls()
	n.FailAt("cuMemCreate", 2, cuda.ErrorOutOfMemory)
	prop := cuda.DeviceAllocationProp(0, cuda.HandleNone)
	h1, err1 := n.MemCreate(2<<20, &prop)
	_, err2 := n.MemCreate(2<<20, &prop)
	fmt.Println(err1)
	fmt.Println(err2)
	for _, c := range n.Calls() {
		fmt.Println(c)
	}
	_ = n.MemRelease(h1)
	fmt.Println(n.CheckNoLeaks())
	// Output:
	// <nil>
	// cuMemCreate: CUDA_ERROR_OUT_OF_MEMORY (2): injected fault
	// cuMemCreate(dev=0 size=2097152)
	// cuMemCreate(dev=0 size=2097152) = CUDA_ERROR_OUT_OF_MEMORY (injected)
	// <nil>
}

// A kernel implemented in Go, loaded from PTX text and launched on a
// stream.
func ExampleConfig_kernels() {
	fill := func(l *sim.Launch) error {
		dst := cuda.DevicePtr(binary.LittleEndian.Uint64(l.Params))
		v := binary.LittleEndian.Uint32(l.Params[8:])
		buf := make([]byte, 4*l.Grid.X*l.Block.X)
		for i := 0; i < len(buf); i += 4 {
			binary.LittleEndian.PutUint32(buf[i:], v)
		}
		return l.Mem.Store(dst, buf)
	}
	const ptx = ".version 8.1\n.target sm_90\n.visible .entry example_fill(.param .align 8 .b8 p[16]) { ret; }\n"

	// The current context is per OS thread, as with the real driver.
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	n := sim.New(sim.Config{Kernels: map[string]sim.KernelFunc{"example_fill": fill}})
	defer n.Close()
	_ = n.Init()
	ctx, _ := n.PrimaryCtxRetain(0)
	defer n.PrimaryCtxRelease(0)
	_ = n.CtxSetCurrent(ctx)
	mod, err := n.ModuleLoadData([]byte(ptx))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer n.ModuleUnload(mod)
	fn, _ := n.ModuleGetFunction(mod, "example_fill")
	p, _ := n.MemAlloc(1024)
	defer n.MemFree(p)

	params := make([]byte, 16)
	binary.LittleEndian.PutUint64(params, uint64(p))
	binary.LittleEndian.PutUint32(params[8:], 0xabcd)
	_ = n.LaunchKernel(fn, cuda.D1(2), cuda.D1(4), 0, 0, unsafe.Pointer(&params[0]), 16)
	_ = n.StreamSynchronize(0)
	out := make([]uint32, 10)
	_ = n.MemcpyDtoH(unsafe.Pointer(&out[0]), p, 40)
	fmt.Printf("%x\n", out)
	// Output:
	// [abcd abcd abcd abcd abcd abcd abcd abcd 0 0]
}
