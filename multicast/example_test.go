package multicast_test

import (
	"fmt"

	"github.com/nvls-go/nvls/cuda"
	"github.com/nvls-go/nvls/cuda/sim"
	"github.com/nvls-go/nvls/multicast"
)

// The documented order on a (simulated) two-GPU node: create, add every
// device, bind each device's memory, map the multicast alias; Close undoes
// it all in reverse.
func Example() {
	d := sim.New(sim.Config{Devices: 2})
	defer d.Close()
	if err := d.Init(); err != nil {
		fmt.Println(err)
		return
	}
	devs := []cuda.Device{0, 1}
	g, err := multicast.Granularity(d, devs, len(devs), 1<<20, cuda.HandleNone)
	if err != nil {
		fmt.Println(err)
		return
	}
	size := multicast.RoundUp(1<<20, g.Size)
	fmt.Println("granularity", g.Size, "size", size)

	o, err := multicast.Create(d, len(devs), size, cuda.HandleNone)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer o.Close()
	var mem []cuda.MemHandle
	for _, dev := range devs {
		prop := cuda.DeviceAllocationProp(dev, cuda.HandleNone)
		h, err := d.MemCreate(size, &prop)
		if err != nil {
			fmt.Println(err)
			return
		}
		defer d.MemRelease(h)
		mem = append(mem, h)
	}

	// Binding before every device was added is refused here, before the
	// driver (which would block) is asked.
	err = o.Bind(0, 0, mem[0], 0, size)
	fmt.Println(err)

	for _, dev := range devs {
		if err := o.AddDevice(dev); err != nil {
			fmt.Println(err)
			return
		}
	}
	for i, dev := range devs {
		if err := o.Bind(dev, 0, mem[i], 0, size); err != nil {
			fmt.Println(err)
			return
		}
	}
	p, err := o.MapMC(devs...)
	fmt.Println("mapped:", p != 0, err)
	fmt.Println("close:", o.Close())
	// Output:
	// granularity 2097152 size 2097152
	// multicast: Bind out of order: not every device has been added (0 of 2 added, not confirmed)
	// mapped: true <nil>
	// close: <nil>
}
