package simkern

import (
	"crypto/rand"
	"encoding/binary"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/nvls-go/nvls/cuda"
	"github.com/nvls-go/nvls/cuda/sim"
	"github.com/nvls-go/nvls/internal/kabi"
	"github.com/nvls-go/nvls/kernels"
)

const mib = 1 << 20

// workspace is a hand-built team workspace on a simulated node: per rank a
// cuMemCreate allocation on its device mapped once (UC, the same address
// for every device, accessible to all), and for the multicast flavor a
// multicast object with every allocation bound (devices added in rank
// order) and mapped once (MC).
type workspace struct {
	n     *sim.Node
	ranks int
	size  uint64
	uc    []uint64
	mc    uint64
	// mem, when set, wraps the memory each rank's launches access (a
	// test's recorder).
	mem func(r int, m sim.Memory) sim.Memory
}

func newWorkspace(t testing.TB, ranks int, f kernels.Flavor) *workspace {
	return newWorkspaceSized(t, ranks, f, 2*mib)
}

// newWorkspaceSized is newWorkspace with size bytes per rank (a multiple of
// 2 MiB).
func newWorkspaceSized(t testing.TB, ranks int, f kernels.Flavor, size uint64) *workspace {
	t.Helper()
	n := sim.New(sim.Config{Devices: ranks, MemoryPerDevice: max(sim.DefaultMemoryPerDevice, 2*size), Kernels: Kernels()})
	t.Cleanup(func() { _ = n.Close() })
	require.NoError(t, n.Init())
	w := &workspace{n: n, ranks: ranks, size: size}
	var all []cuda.AccessDesc
	for r := range ranks {
		all = append(all, cuda.AccessDesc{Location: cuda.DeviceLocation(cuda.Device(r)), Flags: cuda.AccessReadWrite})
	}
	handles := make([]cuda.MemHandle, ranks)
	for r := range ranks {
		prop := cuda.DeviceAllocationProp(cuda.Device(r), cuda.HandlePosixFD)
		h, err := n.MemCreate(w.size, &prop)
		require.NoError(t, err)
		p, err := n.MemAddressReserve(w.size, 0, 0)
		require.NoError(t, err)
		require.NoError(t, n.MemMap(p, w.size, 0, h))
		require.NoError(t, n.MemSetAccess(p, w.size, all))
		handles[r] = h
		w.uc = append(w.uc, uint64(p))
		t.Cleanup(func() {
			_ = n.MemUnmap(p, w.size)
			_ = n.MemAddressFree(p, w.size)
			_ = n.MemRelease(h)
		})
	}
	if f == kernels.Multicast {
		mcp := cuda.MulticastProp{NumDevices: uint32(ranks), Size: w.size, HandleTypes: uint64(cuda.HandlePosixFD)}
		mc, err := n.MulticastCreate(&mcp)
		require.NoError(t, err)
		for r := range ranks {
			require.NoError(t, n.MulticastAddDevice(mc, cuda.Device(r)))
		}
		for r := range ranks {
			require.NoError(t, n.MulticastBindMem(mc, 0, handles[r], 0, w.size))
		}
		p, err := n.MemAddressReserve(w.size, 0, 0)
		require.NoError(t, err)
		require.NoError(t, n.MemMap(p, w.size, 0, mc))
		require.NoError(t, n.MemSetAccess(p, w.size, all))
		w.mc = uint64(p)
		t.Cleanup(func() {
			_ = n.MemUnmap(p, w.size)
			_ = n.MemAddressFree(p, w.size)
			for r := range ranks {
				_ = n.MulticastUnbind(mc, cuda.Device(r), 0, w.size)
			}
			_ = n.MemRelease(mc)
		})
	}
	return w
}

// params returns rank r's params with the workspace filled in.
func (w *workspace) params(r int) kabi.Params {
	p := kabi.Params{MC: w.mc, Rank: uint32(r), NRanks: uint32(w.ranks), TimeoutNs: uint64(20 * time.Second)}
	copy(p.UC[:], w.uc)
	return p
}

// launch runs entry name on every rank listed in ranks (all when nil), one
// goroutine each, as the stream of each device would, and returns each
// rank's error.
func (w *workspace) launch(t testing.TB, name string, grid, block uint32, ranks []int, mk func(r int) kabi.Params) []error {
	t.Helper()
	fn, ok := Kernels()[name]
	require.True(t, ok, "no kernel registered as %s", name)
	if ranks == nil {
		for r := range w.ranks {
			ranks = append(ranks, r)
		}
	}
	errs := make([]error, w.ranks)
	var wg sync.WaitGroup
	for _, r := range ranks {
		p := mk(r)
		mem := w.n.Memory(cuda.Device(r))
		if w.mem != nil {
			mem = w.mem(r, mem)
		}
		l := &sim.Launch{Name: name, Device: cuda.Device(r), Grid: cuda.D1(grid), Block: cuda.D1(block),
			Params: p.Marshal(), Mem: mem}
		wg.Add(1)
		go func() {
			defer wg.Done()
			errs[r] = fn(l)
		}()
	}
	wg.Wait()
	return errs
}

func (w *workspace) read(t testing.TB, r int, off uint64, n int) []byte {
	t.Helper()
	b, err := w.n.ReadDevice(cuda.DevicePtr(w.uc[r]+off), n)
	require.NoError(t, err)
	return b
}

func (w *workspace) write(t testing.TB, r int, off uint64, b []byte) {
	t.Helper()
	require.NoError(t, w.n.WriteDevice(cuda.DevicePtr(w.uc[r]+off), b))
}

func (w *workspace) u32(t testing.TB, r int, off uint64) uint32 {
	return binary.LittleEndian.Uint32(w.read(t, r, off, 4))
}

func (w *workspace) status(t testing.TB, r int) kabi.Status {
	return kabi.Status{Word: binary.LittleEndian.Uint64(w.read(t, r, kabi.StatusOffset, 8))}
}

func randBytes(t testing.TB, n int) []byte {
	t.Helper()
	b := make([]byte, n)
	_, err := rand.Read(b)
	require.NoError(t, err)
	return b
}
