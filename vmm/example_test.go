package vmm_test

import (
	"errors"
	"fmt"

	"github.com/nvls-go/nvls/cuda"
	"github.com/nvls-go/nvls/cuda/sim"
	"github.com/nvls-go/nvls/vmm"
)

// simNode is a simulated node for the examples; on a GPU machine the
// driver would come from cuda.Open instead.
func simNode(devices int) *sim.Node {
	n := sim.New(sim.Config{Devices: devices})
	if err := n.Init(); err != nil {
		panic(err)
	}
	return n
}

func ExampleBuffer() {
	n := simNode(2)
	defer n.Close()

	// 3 MiB on device 0, rounded up to the 2 MiB granularity, readable
	// and writable by both devices.
	b, err := vmm.NewBuffer(n, 0, 3<<20, vmm.BufferOptions{Access: []cuda.Device{0, 1}})
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Printf("%d MiB on device %d\n", b.Size()>>20, b.Device())

	// A kernel on device 1 writes; one on device 0 reads.
	if err := n.Memory(1).Store(b.Ptr(), []byte("over NVLink")); err != nil {
		fmt.Println(err)
	}
	got := make([]byte, 11)
	if err := n.Memory(0).Load(b.Ptr(), got); err != nil {
		fmt.Println(err)
	}
	fmt.Println(string(got))

	// Unmap, release, free.
	fmt.Println("close:", b.Close())
	fmt.Println("leaks:", n.CheckNoLeaks())
	// Output:
	// 4 MiB on device 0
	// over NVLink
	// close: <nil>
	// leaks: <nil>
}

func ExampleGrowable() {
	n := simNode(1)
	defer n.Close()

	g, err := vmm.NewGrowable(n, 1<<20, vmm.GrowableOptions{
		Device:  0,
		Chunk:   2 << 20,
		Reserve: 8 << 20,
		OnMove:  func(old, new cuda.DevicePtr) { fmt.Println("moved") },
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer g.Close()
	base := g.Ptr()
	show := func() {
		fmt.Printf("len %2d MiB, mapped %2d MiB, cap %2d MiB, same base %v, reservations %d\n",
			g.Len()>>20, g.Mapped()>>20, g.Cap()>>20, g.Ptr() == base, g.Reservations())
	}
	show()

	// Within the reservation: new chunks are mapped at the end.
	if err := g.Grow(5 << 20); err != nil {
		fmt.Println(err)
	}
	show()

	// Past it: the driver grants the range right after the end, so the
	// base stays.
	if err := g.Grow(6 << 20); err != nil {
		fmt.Println(err)
	}
	show()

	// Shrinking releases the chunks past the new end.
	if err := g.Shrink(9 << 20); err != nil {
		fmt.Println(err)
	}
	show()
	// Output:
	// len  1 MiB, mapped  2 MiB, cap  8 MiB, same base true, reservations 1
	// len  6 MiB, mapped  6 MiB, cap  8 MiB, same base true, reservations 1
	// len 12 MiB, mapped 12 MiB, cap 16 MiB, same base true, reservations 2
	// len  3 MiB, mapped  4 MiB, cap 16 MiB, same base true, reservations 2
}

func ExampleStriped() {
	n := simNode(4)
	defer n.Close()

	// 16 MiB in 2 MiB stripes over devices 0..3, accessible from all.
	s, err := vmm.NewStriped(n, 16<<20, vmm.StripedOptions{Devices: []cuda.Device{0, 1, 2, 3}, Chunk: 2 << 20})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer s.Close()
	for i := range s.Chunks() {
		p := s.Ptr() + cuda.DevicePtr(uint64(i)*s.Chunk())
		ord, err := n.PointerGetAttribute(cuda.PointerAttrDeviceOrdinal, p)
		if err != nil {
			fmt.Println(err)
		}
		fmt.Printf("chunk %d: device %d\n", i, ord)
	}
	// Output:
	// chunk 0: device 0
	// chunk 1: device 1
	// chunk 2: device 2
	// chunk 3: device 3
	// chunk 4: device 0
	// chunk 5: device 1
	// chunk 6: device 2
	// chunk 7: device 3
}

func ExampleSparse() {
	n := simNode(1)
	defer n.Close()

	// Reserve 1 GiB of address space; commit memory only where needed.
	s, err := vmm.NewSparse(n, 1<<30, vmm.SparseOptions{Device: 0, Chunk: 2 << 20})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer s.Close()
	if err := s.Commit(512<<20, 4<<20); err != nil {
		fmt.Println(err)
	}
	fmt.Printf("committed %d MiB of %d MiB\n", s.Committed()>>20, s.Size()>>20)

	mem := n.Memory(0)
	buf := []byte("sparse")
	fmt.Println("committed page:", mem.Store(s.Ptr()+512<<20, buf))
	err = mem.Store(s.Ptr(), buf)
	fmt.Println("uncommitted page faults:", errors.Is(err, cuda.ErrIllegalAddress))
	// Output:
	// committed 4 MiB of 1024 MiB
	// committed page: <nil>
	// uncommitted page faults: true
}
