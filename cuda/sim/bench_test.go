package sim

import (
	"testing"

	"github.com/nvls-go/nvls/cuda"
)

func BenchmarkStore64MiB(b *testing.B) {
	n := newNode(b, Config{MemoryPerDevice: 256 * mib})
	buf := mapOn(b, n, 0, 64*mib, 0)
	data := make([]byte, 64*mib)
	mem := n.Memory(0)
	b.SetBytes(int64(len(data)))
	for b.Loop() {
		if err := mem.Store(buf.ptr, data); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkLoad64MiB(b *testing.B) {
	n := newNode(b, Config{MemoryPerDevice: 256 * mib})
	buf := mapOn(b, n, 0, 64*mib, 0)
	data := make([]byte, 64*mib)
	mem := n.Memory(0)
	if err := mem.Store(buf.ptr, data); err != nil {
		b.Fatal(err)
	}
	b.SetBytes(int64(len(data)))
	for b.Loop() {
		if err := mem.Load(buf.ptr, data); err != nil {
			b.Fatal(err)
		}
	}
}

func BenchmarkMultimemLoad16x8(b *testing.B) {
	n := newNode(b, Config{Devices: 8})
	tm := newMCTeam(b, n, 8, 2*mib)
	mem := n.Memory(3)
	b.SetBytes(16)
	i := 0
	for b.Loop() {
		if _, err := mem.MultimemLoad(tm.mcVA+cuda.DevicePtr(i%(1<<16))*16, 16); err != nil {
			b.Fatal(err)
		}
		i++
	}
}

func BenchmarkMultimemStore16x8(b *testing.B) {
	n := newNode(b, Config{Devices: 8})
	tm := newMCTeam(b, n, 8, 2*mib)
	mem := n.Memory(3)
	src := make([]byte, 16)
	b.SetBytes(16)
	i := 0
	for b.Loop() {
		if err := mem.MultimemStore(tm.mcVA+cuda.DevicePtr(i%(1<<16))*16, src); err != nil {
			b.Fatal(err)
		}
		i++
	}
}
