//go:build linux

package nccl

// The binding's tests against a fake libnccl (testdata/fake_nccl.c): on
// Linux, the one system the binding loads libraries on (internal/dl).

import (
	"math/rand/v2"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"sync"
	"testing"

	"github.com/ebitengine/purego"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/nvls-go/nvls/cuda"
)

// fakes are the stand-ins for libnccl.so.2 built so far, by variant (the
// C compiler's -D flags): each is built once per test binary.
var fakes struct {
	sync.Mutex
	path map[string]string
}

// fakeBuild builds testdata/fake_nccl.c with defs (a variant) into a
// shared library and returns its path. Skips without a C compiler.
func fakeBuild(t *testing.T, defs ...string) string {
	t.Helper()
	cc, err := exec.LookPath("cc")
	if err != nil {
		t.Skip("no C compiler (cc) to build the fake libnccl")
	}
	fakes.Lock()
	defer fakes.Unlock()
	key := strings.Join(defs, " ")
	if p, ok := fakes.path[key]; ok {
		return p
	}
	dir, err := os.MkdirTemp("", "fakenccl")
	require.NoError(t, err)
	p := filepath.Join(dir, "libnccl.so.2")
	args := append([]string{"-shared", "-fPIC", "-O1", "-o", p}, defs...)
	out, err := exec.Command(cc, append(args, "testdata/fake_nccl.c")...).CombinedOutput()
	require.NoError(t, err, "building the fake libnccl: %s", out)
	if fakes.path == nil {
		fakes.path = map[string]string{}
	}
	fakes.path[key] = p
	return p
}

// fakeLib opens the fake libnccl (variant defs) through the binding, and
// returns the handle of the same library for its test hooks.
func fakeLib(t *testing.T, defs ...string) (*Lib, uintptr) {
	t.Helper()
	path := fakeBuild(t, defs...)
	l, err := OpenPath(path)
	require.NoError(t, err)
	t.Cleanup(func() { _ = l.Close() })
	h, err := purego.Dlopen(path, purego.RTLD_NOW)
	require.NoError(t, err)
	t.Cleanup(func() { _ = purego.Dlclose(h) })
	return l, h
}

func lastArgs(t *testing.T, h uintptr) [8]uint64 {
	var f func(out *[8]uint64)
	purego.RegisterLibFunc(&f, h, "fake_last")
	var out [8]uint64
	f(&out)
	return out
}

func TestVersionAndErrors(t *testing.T) {
	l, _ := fakeLib(t)
	v, err := l.Version()
	require.NoError(t, err)
	assert.Equal(t, 22803, v)
	assert.Equal(t, "2.28.3", VersionString(v))
	assert.Equal(t, "invalid argument (fake)", l.ErrorString(InvalidArgument))

	// GroupEnd without GroupStart: the fake returns ncclInvalidUsage.
	err = l.GroupEnd()
	require.Error(t, err)
	assert.ErrorIs(t, err, ErrInvalidUsage)
	assert.NotErrorIs(t, err, ErrInvalidArgument)
	var ne *Error
	require.ErrorAs(t, err, &ne)
	assert.Equal(t, "ncclGroupEnd", ne.Op)
	assert.Contains(t, err.Error(), "invalid usage (fake)")
}

func TestCommInitAllAndDestroy(t *testing.T) {
	l, h := fakeLib(t)
	devs := []int{3, 1, 0, 2}
	comms, err := l.CommInitAll(devs)
	require.NoError(t, err)
	require.Len(t, comms, 4)
	for i, d := range devs {
		assert.Equal(t, Comm(0x1000+d), comms[i])
	}
	assert.Equal(t, uint64(4), lastArgs(t, h)[0])
	for _, c := range comms {
		require.NoError(t, l.CommDestroy(c))
		assert.Equal(t, uint64(c), lastArgs(t, h)[0])
	}
	assert.ErrorIs(t, l.CommDestroy(0), ErrInvalidArgument)
	assert.ErrorIs(t, l.CommDestroy(Comm(0x9999)), ErrInvalidArgument) // the fake's answer
	_, err = l.CommInitAll(make([]int, 9))
	assert.ErrorIs(t, err, ErrInvalidArgument)
	_, err = l.CommInitAll(nil)
	assert.ErrorIs(t, err, ErrInvalidArgument)
}

// The 128-byte ncclUniqueId is passed by value: this checks every byte
// arrives, with random content, and that the arguments after it do too.
func TestCommInitRankPassesUniqueIDByValue(t *testing.T) {
	l, h := fakeLib(t)
	id, err := l.GetUniqueID()
	require.NoError(t, err)
	for i := range id.Internal {
		require.Equal(t, byte(i*7+3), id.Internal[i])
	}
	for i := range id.Internal {
		id.Internal[i] = byte(rand.IntN(256))
	}
	var want uint64
	for i, b := range id.Internal {
		want += uint64(b) * uint64(i+1)
	}
	nranks, rank := 2+rand.IntN(7), 0
	rank = rand.IntN(nranks)
	c, err := l.CommInitRank(nranks, id, rank)
	require.NoError(t, err)
	assert.Equal(t, Comm(0x2000+rank), c)
	a := lastArgs(t, h)
	assert.Equal(t, uint64(nranks), a[0])
	assert.Equal(t, uint64(rank), a[1])
	var fid func(sum *uint64, first, last *int32)
	purego.RegisterLibFunc(&fid, h, "fake_id")
	var sum uint64
	var first, last int32
	fid(&sum, &first, &last)
	assert.Equal(t, want, sum)
	assert.Equal(t, int32(id.Internal[0]), first)
	assert.Equal(t, int32(id.Internal[127]), last)

	_, err = l.CommInitRank(2, id, 2)
	assert.ErrorIs(t, err, ErrInvalidArgument)
}

func TestCollectiveArguments(t *testing.T) {
	l, h := fakeLib(t)
	send := cuda.DevicePtr(rand.Uint64() >> 8)
	recv := cuda.DevicePtr(rand.Uint64() >> 8)
	count := rand.Uint64() >> 20
	stream := cuda.Stream(rand.Uint64() >> 8)
	comm := Comm(rand.Uint64() >> 8)

	require.NoError(t, l.GroupStart())
	require.NoError(t, l.AllReduce(send, recv, count, Bfloat16, Min, comm, stream))
	a := lastArgs(t, h)
	assert.Equal(t, [7]uint64{uint64(send), uint64(recv), count, 9, 3, uint64(comm), uint64(stream)}, [7]uint64(a[:7]))
	require.NoError(t, l.Broadcast(send, recv, count, Float32, 5, comm, stream))
	a = lastArgs(t, h)
	assert.Equal(t, [7]uint64{uint64(send), uint64(recv), count, 7, 5, uint64(comm), uint64(stream)}, [7]uint64(a[:7]))
	require.NoError(t, l.ReduceScatter(send, recv, count, Float16, Max, comm, stream))
	assert.Equal(t, [8]uint64{uint64(send), uint64(recv), count, 6, 2, uint64(comm), uint64(stream), 1}, lastArgs(t, h))
	require.NoError(t, l.AllGather(send, recv, count, Uint64, comm, stream))
	assert.Equal(t, [8]uint64{uint64(send), uint64(recv), count, 5, uint64(comm), uint64(stream), 0, 2}, lastArgs(t, h))
	require.NoError(t, l.Reduce(send, recv, count, Int32, Min, 3, comm, stream))
	assert.Equal(t, [8]uint64{uint64(send), uint64(recv), count, 2, 3, 3, uint64(comm), uint64(stream)}, lastArgs(t, h))
	require.NoError(t, l.GroupEnd())

	assert.ErrorIs(t, l.Reduce(send, recv, count, Float32, Sum, -1, comm, stream), ErrInvalidArgument)
	err := l.AllReduce(send, recv, count, DataType(42), Sum, comm, stream)
	assert.ErrorIs(t, err, ErrInvalidArgument)
	assert.ErrorIs(t, l.Broadcast(send, recv, count, Float32, -1, comm, stream), ErrInvalidArgument)
}

func TestAsyncError(t *testing.T) {
	l, h := fakeLib(t)
	var set func(r int32)
	purego.RegisterLibFunc(&set, h, "fake_set_async")
	require.NoError(t, l.CommAsyncError(Comm(0x1000)))
	set(int32(RemoteError))
	defer set(0)
	err := l.CommAsyncError(Comm(0x1000))
	assert.ErrorIs(t, err, ErrRemote)
}

func TestClosed(t *testing.T) {
	l, _ := fakeLib(t)
	require.NoError(t, l.Close())
	require.NoError(t, l.Close())
	_, err := l.Version()
	assert.ErrorIs(t, err, ErrClosed)
	assert.ErrorIs(t, l.AllReduce(0, 0, 1, Float32, Sum, 1, 0), ErrClosed)
}
