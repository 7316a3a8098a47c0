//go:build linux

package nccl

// Against the fake libnccl, as lib_test.go: Linux only.

import (
	"errors"
	"math/rand/v2"
	"testing"

	"github.com/ebitengine/purego"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/nvls-go/nvls/cuda"
)

// The variants of the fake that stand for older NCCLs.
var (
	// fakeOld is NCCL 2.26.5: ncclMemAlloc, no windows.
	fakeOld = []string{"-DFAKE_NO_WINDOWS", "-DFAKE_VERSION=22605"}
	// fakeOddVersion has the windows' entry points but says 2.27.1.
	fakeOddVersion = []string{"-DFAKE_VERSION=22701"}
)

func TestSymmetricProbe(t *testing.T) {
	l, _ := fakeLib(t)
	require.NoError(t, l.Symmetric(), "2.28.3 with every entry point")

	old, _ := fakeLib(t, fakeOld...)
	err := old.Symmetric()
	require.Error(t, err)
	assert.ErrorIs(t, err, ErrNotAvailable)
	assert.Contains(t, err.Error(), "symmetric memory needs NCCL 2.27.3 or later")
	assert.Contains(t, err.Error(), "(NCCL 2.26.5) has no ncclCommWindowRegister")
	// What exists in 2.19 works; what does not says so, naming the call.
	_, err = old.RegisterWindows([]WindowRequest{{Comm: 1, Buf: 0x1000, Size: 4096}}, func(int) error { return nil })
	assert.ErrorIs(t, err, ErrNotAvailable)
	assert.Contains(t, err.Error(), "has no ncclCommWindowRegister")
	assert.ErrorIs(t, old.CommWindowDeregister(1, 0x5000), ErrNotAvailable)
	p, err := old.MemAlloc(4096)
	require.NoError(t, err)
	require.NoError(t, old.MemFree(p))

	odd, _ := fakeLib(t, fakeOddVersion...)
	err = odd.Symmetric()
	assert.ErrorIs(t, err, ErrNotAvailable)
	assert.Contains(t, err.Error(), "is NCCL 2.27.1")

	require.NoError(t, l.Close())
	assert.ErrorIs(t, l.Symmetric(), ErrClosed)
	_, err = l.MemAlloc(1)
	assert.ErrorIs(t, err, ErrClosed)
}

func TestMemAlloc(t *testing.T) {
	l, h := fakeLib(t)
	size := 1 + rand.Uint64N(1<<20)
	p, err := l.MemAlloc(size)
	require.NoError(t, err)
	assert.NotZero(t, p)
	assert.Equal(t, size, lastArgs(t, h)[0])
	require.NoError(t, l.MemFree(p))
	assert.Equal(t, uint64(p), lastArgs(t, h)[0])
	_, err = l.MemAlloc(0)
	assert.ErrorIs(t, err, ErrInvalidArgument)
}

// fakeRegs are the fake's registrations from index from on: (comm, buf,
// size, flags) each.
func fakeRegs(t *testing.T, h uintptr, from int) [][4]uint64 {
	var n func() int32
	var get func(i int32, out *[4]uint64)
	purego.RegisterLibFunc(&n, h, "fake_nreg")
	purego.RegisterLibFunc(&get, h, "fake_reg")
	var out [][4]uint64
	for i := from; i < int(n()); i++ {
		var r [4]uint64
		get(int32(i), &r)
		out = append(out, r)
	}
	return out
}

func fakeCount(h uintptr, name string) int {
	var f func() int32
	purego.RegisterLibFunc(&f, h, name)
	return int(f())
}

// The fake writes windows at ncclGroupEnd as NCCL 2.28+ does: they must
// be read after it, and every argument must arrive.
func TestRegisterWindows(t *testing.T) {
	l, h := fakeLib(t)
	from := fakeCount(h, "fake_nreg")
	live := fakeCount(h, "fake_live_windows")
	reqs := make([]WindowRequest, 2+rand.IntN(6))
	for i := range reqs {
		reqs[i] = WindowRequest{Comm: Comm(0x1000 + i), Buf: cuda.DevicePtr(rand.Uint64() >> 12 << 12), Size: 1 + rand.Uint64N(1<<40), Flags: WinCollSymmetric}
	}
	var current []int
	wins, err := l.RegisterWindows(reqs, func(i int) error { current = append(current, i); return nil })
	require.NoError(t, err)
	require.Len(t, wins, len(reqs))
	regs := fakeRegs(t, h, from)
	require.Len(t, regs, len(reqs))
	for i, r := range reqs {
		assert.Equal(t, Window(0x5000+from+i), wins[i], "window %d, read after the group ended", i)
		assert.Equal(t, [4]uint64{uint64(r.Comm), uint64(r.Buf), r.Size, WinCollSymmetric}, regs[i])
		assert.Equal(t, i, current[i], "the device of each request made current before it")
	}
	assert.Equal(t, 0, fakeCount(h, "fake_group_depth"), "the group is closed")
	assert.Equal(t, live+len(reqs), fakeCount(h, "fake_live_windows"))
	for i, w := range wins {
		require.NoError(t, l.CommWindowDeregister(reqs[i].Comm, w))
	}
	assert.Equal(t, live, fakeCount(h, "fake_live_windows"))
	assert.ErrorIs(t, l.CommWindowDeregister(1, 0), ErrInvalidArgument)
	assert.ErrorIs(t, l.CommWindowDeregister(1, 0x4fff), ErrInvalidArgument, "the fake's answer")
}

func TestRegisterWindowsFailures(t *testing.T) {
	l, h := fakeLib(t)
	var nothing func(v int32)
	purego.RegisterLibFunc(&nothing, h, "fake_set_registered_nothing")
	nothing(1)
	wins, err := l.RegisterWindows([]WindowRequest{{Comm: 0x1000, Buf: 0x10000, Size: 4096, Flags: WinCollSymmetric}}, func(int) error { return nil })
	nothing(0)
	require.Error(t, err)
	assert.ErrorIs(t, err, ErrNoWindow)
	assert.ErrorIs(t, err, ErrNotAvailable)
	assert.Equal(t, []Window{0}, wins)

	// The device cannot be made current: the group still ends.
	boom := errors.New("boom")
	_, err = l.RegisterWindows([]WindowRequest{{Comm: 1, Buf: 0x10000, Size: 1}}, func(int) error { return boom })
	assert.ErrorIs(t, err, boom)
	assert.Equal(t, 0, fakeCount(h, "fake_group_depth"))
	// NCCL refuses (the fake: 0 bytes).
	_, err = l.RegisterWindows([]WindowRequest{{Comm: 1, Buf: 0x10000}}, func(int) error { return nil })
	assert.ErrorIs(t, err, ErrInvalidArgument)
	assert.Equal(t, 0, fakeCount(h, "fake_group_depth"))
	wins, err = l.RegisterWindows(nil, nil)
	assert.NoError(t, err)
	assert.Empty(t, wins)
}
