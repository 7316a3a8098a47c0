package sim

import (
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/nvls-go/nvls/cuda"
	"github.com/nvls-go/nvls/internal/posixfd"
)

func TestFailAt(t *testing.T) {
	n := newNode(t, Config{})
	prop := cuda.DeviceAllocationProp(0, cuda.HandleNone)
	n.FailAt("cuMemCreate", 2, cuda.ErrorOutOfMemory)
	h1, err := n.MemCreate(2*mib, &prop)
	require.NoError(t, err)
	// Other entry points do not count.
	_, err = n.DeviceCount()
	require.NoError(t, err)
	_, err = n.MemCreate(2*mib, &prop)
	e := requireCode(t, err, "cuMemCreate", cuda.ErrorOutOfMemory)
	require.Equal(t, "injected fault", e.Detail)
	require.Equal(t, uint64(2*mib), n.Live().DeviceBytes[0], "an injected failure has no side effect")
	h3, err := n.MemCreate(2*mib, &prop)
	require.NoError(t, err, "a fault fires once")

	calls := n.CallsOf("cuMemCreate")
	require.Len(t, calls, 3)
	require.Equal(t, cuda.Success, calls[0].Result)
	require.Equal(t, cuda.ErrorOutOfMemory, calls[1].Result)
	require.True(t, calls[1].Injected)
	require.Equal(t, 0, calls[1].Device)
	require.Equal(t, uint64(2*mib), calls[1].Size)
	require.Equal(t, "cuMemCreate(dev=0 size=2097152) = CUDA_ERROR_OUT_OF_MEMORY (injected)", calls[1].String())
	require.NoError(t, n.MemRelease(h1))
	require.NoError(t, n.MemRelease(h3))

	// Real failures are recorded with their code.
	require.Error(t, n.MemRelease(h3))
	last := n.Calls()[len(n.Calls())-1]
	require.Equal(t, "cuMemRelease", last.Op)
	require.Equal(t, cuda.ErrorInvalidValue, last.Result)
	require.False(t, last.Injected)
	n.ResetCalls()
	require.Empty(t, n.Calls())
	require.Zero(t, n.CallCount())
}

// bringUp is the multicast bring-up of a team over ndev devices, the way
// package multicast does it, undoing what it did when a step fails. It
// runs on a goroutine locked to its thread.
func bringUp(n *Node, ndev int, size uint64) (teardown func() error, err error) {
	var undo []func() error
	fail := func(e error) (func() error, error) {
		for i := len(undo) - 1; i >= 0; i-- {
			_ = undo[i]()
		}
		return nil, e
	}
	step := func(u func() error) { undo = append(undo, u) }

	for d := 0; d < ndev; d++ {
		dev := cuda.Device(d)
		if _, err := n.PrimaryCtxRetain(dev); err != nil {
			return fail(err)
		}
		step(func() error { return n.PrimaryCtxRelease(dev) })
	}
	ctx0, err := n.PrimaryCtxRetain(0)
	if err != nil {
		return fail(err)
	}
	step(func() error { return n.PrimaryCtxRelease(0) })
	if err := n.CtxSetCurrent(ctx0); err != nil {
		return fail(err)
	}
	step(func() error { return n.CtxSetCurrent(0) })
	s, err := n.StreamCreate(cuda.StreamNonBlocking)
	if err != nil {
		return fail(err)
	}
	step(func() error { return n.StreamDestroy(s) })

	mprop := cuda.MulticastProp{NumDevices: uint32(ndev), Size: size, HandleTypes: uint64(cuda.HandlePosixFD)}
	mc, err := n.MulticastCreate(&mprop)
	if err != nil {
		return fail(err)
	}
	step(func() error { return n.MemRelease(mc) })
	// Export and import the object as another process would.
	sh, err := n.MemExportToShareableHandle(mc, cuda.HandlePosixFD)
	if err != nil {
		return fail(err)
	}
	mc2, err := n.MemImportFromShareableHandle(sh)
	_ = posixfd.Close(sh.FD)
	if err != nil {
		return fail(err)
	}
	step(func() error { return n.MemRelease(mc2) })
	for d := 0; d < ndev; d++ {
		if err := n.MulticastAddDevice(mc2, cuda.Device(d)); err != nil {
			return fail(err)
		}
	}
	var all []cuda.AccessDesc
	for d := 0; d < ndev; d++ {
		all = append(all, cuda.AccessDesc{Location: cuda.DeviceLocation(cuda.Device(d)), Flags: cuda.AccessReadWrite})
	}
	var lastUC cuda.DevicePtr
	for d := 0; d < ndev; d++ {
		prop := cuda.DeviceAllocationProp(cuda.Device(d), cuda.HandlePosixFD)
		h, err := n.MemCreate(size, &prop)
		if err != nil {
			return fail(err)
		}
		step(func() error { return n.MemRelease(h) })
		p, err := n.MemAddressReserve(size, 0, 0)
		if err != nil {
			return fail(err)
		}
		step(func() error { return n.MemAddressFree(p, size) })
		if err := n.MemMap(p, size, 0, h); err != nil {
			return fail(err)
		}
		step(func() error { return n.MemUnmap(p, size) })
		lastUC = p
		if err := n.MemSetAccess(p, size, all); err != nil {
			return fail(err)
		}
		if err := n.MulticastBindMem(mc, 0, h, 0, size); err != nil {
			return fail(err)
		}
		dev := cuda.Device(d)
		step(func() error { return n.MulticastUnbind(mc, dev, 0, size) })
	}
	va, err := n.MemAddressReserve(size, 0, 0)
	if err != nil {
		return fail(err)
	}
	step(func() error { return n.MemAddressFree(va, size) })
	if err := n.MemMap(va, size, 0, mc); err != nil {
		return fail(err)
	}
	step(func() error { return n.MemUnmap(va, size) })
	if err := n.MemSetAccess(va, size, all); err != nil {
		return fail(err)
	}
	if err := n.MemsetD32Async(lastUC, 0x01020304, size/4, s); err != nil {
		return fail(err)
	}
	if err := n.StreamSynchronize(s); err != nil {
		return fail(err)
	}
	return func() error {
		var errs []error
		for i := len(undo) - 1; i >= 0; i-- {
			errs = append(errs, undo[i]())
		}
		return errors.Join(errs...)
	}, nil
}

func TestFailNthUnwindsEveryStep(t *testing.T) {
	n := newNode(t, Config{Devices: 4})
	run := func(f func()) {
		done := make(chan struct{})
		go func() {
			defer close(done)
			runtimeLockAndRun(f)
		}()
		<-done
	}
	var calls int
	run(func() {
		n.ResetCalls()
		td, err := bringUp(n, 4, 2*mib)
		require.NoError(t, err)
		calls = n.CallCount()
		require.NoError(t, td())
	})
	require.NoError(t, n.CheckNoLeaks())
	require.Greater(t, calls, 30)
	for nth := 1; nth <= calls; nth++ {
		run(func() {
			n.ResetCalls()
			n.FailNth(nth, cuda.ErrorOutOfMemory)
			td, err := bringUp(n, 4, 2*mib)
			require.Error(t, err, "call %d", nth)
			require.Nil(t, td)
			require.True(t, errors.Is(err, cuda.ErrOutOfMemory), "call %d: %v", nth, err)
			log := n.Calls()
			require.True(t, log[nth-1].Injected, "call %d: %v", nth, log[nth-1])
			n.ClearFaults()
		})
		require.NoError(t, n.CheckNoLeaks(), "after a failure of call %d (%s)", nth, func() string {
			return fmt.Sprint(n.Calls()[nth-1])
		}())
	}
}

func TestLiveAndCheckNoLeaks(t *testing.T) {
	n := newNode(t, Config{})
	require.NoError(t, n.CheckNoLeaks())
	ctx, err := n.PrimaryCtxRetain(1)
	require.NoError(t, err)
	_ = ctx
	b := mapOn(t, n, 1, 4*mib, 1)
	mprop := cuda.MulticastProp{NumDevices: 1, Size: 2 * mib}
	mc, err := n.MulticastCreate(&mprop)
	require.NoError(t, err)
	l := n.Live()
	require.Equal(t, Live{Allocations: 1, Handles: 2, Reservations: 1, Mappings: 1, MulticastObjects: 1, RetainedContexts: 1, DeviceBytes: []uint64{0, 4 * mib, 0, 0}}, l)
	err = n.CheckNoLeaks()
	require.True(t, errors.Is(err, ErrLeak))
	require.Contains(t, err.Error(), "1 multicast objects")
	require.Contains(t, err.Error(), "4194304 bytes on device 1")
	require.NoError(t, n.MemRelease(mc))
	b.free(t, n)
	require.NoError(t, n.PrimaryCtxRelease(1))
	require.NoError(t, n.CheckNoLeaks())
}
