package sim

import (
	"crypto/rand"
	"errors"
	"runtime"
	"testing"

	"github.com/stretchr/testify/require"

	"github.com/nvls-go/nvls/cuda"
)

const mib = 1 << 20

// newNode returns an initialised node that the test closes.
func newNode(t testing.TB, cfg Config) *Node {
	t.Helper()
	if cfg.Kernels == nil {
		cfg.Kernels = testKernels
	}
	n := New(cfg)
	t.Cleanup(func() { _ = n.Close() })
	require.NoError(t, n.Init())
	return n
}

// useDevice locks the test goroutine to its thread and makes dev's primary
// context current; the context is released at cleanup.
func useDevice(t testing.TB, n *Node, dev cuda.Device) cuda.Context {
	t.Helper()
	runtime.LockOSThread()
	ctx, err := n.PrimaryCtxRetain(dev)
	require.NoError(t, err)
	require.NoError(t, n.CtxSetCurrent(ctx))
	t.Cleanup(func() {
		_ = n.CtxSetCurrent(0)
		_ = n.PrimaryCtxRelease(dev)
		runtime.UnlockOSThread()
	})
	return ctx
}

// vmBuf is a cuMemCreate allocation mapped at ptr.
type vmBuf struct {
	h    cuda.MemHandle
	ptr  cuda.DevicePtr
	size uint64
}

// mapOn creates size bytes on dev, reserves and maps them, and gives the
// listed devices read-write access.
func mapOn(t testing.TB, n *Node, dev cuda.Device, size uint64, access ...cuda.Device) vmBuf {
	t.Helper()
	prop := cuda.DeviceAllocationProp(dev, cuda.HandlePosixFD)
	h, err := n.MemCreate(size, &prop)
	require.NoError(t, err)
	p, err := n.MemAddressReserve(size, 0, 0)
	require.NoError(t, err)
	require.NoError(t, n.MemMap(p, size, 0, h))
	if len(access) > 0 {
		var desc []cuda.AccessDesc
		for _, d := range access {
			desc = append(desc, cuda.AccessDesc{Location: cuda.DeviceLocation(d), Flags: cuda.AccessReadWrite})
		}
		require.NoError(t, n.MemSetAccess(p, size, desc))
	}
	return vmBuf{h: h, ptr: p, size: size}
}

func (b vmBuf) free(t testing.TB, n *Node) {
	t.Helper()
	require.NoError(t, n.MemUnmap(b.ptr, b.size))
	require.NoError(t, n.MemAddressFree(b.ptr, b.size))
	require.NoError(t, n.MemRelease(b.h))
}

func randBytes(t testing.TB, k int) []byte {
	t.Helper()
	b := make([]byte, k)
	_, err := rand.Read(b)
	require.NoError(t, err)
	return b
}

// requireCode checks that err is a *cuda.Error of op with the given code.
func requireCode(t testing.TB, err error, op string, code cuda.Result) *cuda.Error {
	t.Helper()
	require.Error(t, err)
	var e *cuda.Error
	require.True(t, errors.As(err, &e), "not a *cuda.Error: %v", err)
	require.Equal(t, code, e.Code, "%v", err)
	if op != "" {
		require.Equal(t, op, e.Op, "%v", err)
	}
	return e
}

// runtimeLockAndRun runs fn on the calling goroutine locked to a fresh
// OS thread (the thread is discarded afterwards).
func runtimeLockAndRun(fn func()) {
	runtime.LockOSThread()
	fn()
	// Not unlocking makes the runtime end the thread with the goroutine,
	// so no later goroutine inherits its per-thread state.
}

// newStreams creates k non-blocking streams on the current context.
func newStreams(t *testing.T, n *Node, k int) []cuda.Stream {
	t.Helper()
	ss := make([]cuda.Stream, k)
	for i := range ss {
		var err error
		ss[i], err = n.StreamCreate(cuda.StreamNonBlocking)
		require.NoError(t, err)
	}
	return ss
}

// newEvents creates k events without timing on the current context.
func newEvents(t *testing.T, n *Node, k int) []cuda.Event {
	t.Helper()
	evs := make([]cuda.Event, k)
	for i := range evs {
		var err error
		evs[i], err = n.EventCreate(cuda.EventDisableTiming)
		require.NoError(t, err)
	}
	return evs
}

// edgeOf makes to's later work follow from's work so far, through event e
// (a fork or a join in a capture).
func edgeOf(t *testing.T, n *Node, e cuda.Event, from, to cuda.Stream) {
	t.Helper()
	require.NoError(t, n.EventRecord(e, from))
	require.NoError(t, n.StreamWaitEvent(to, e))
}
