package sim

import (
	"encoding/binary"
	"errors"
	"sync"
	"testing"
	"unsafe"

	"github.com/stretchr/testify/require"

	"github.com/nvls-go/nvls/cuda"
)

// Test kernels. Parameters are little-endian uint64 words.

const testPTX = `//
// Generated for the simulator's tests.
//
.version 8.1
.target sm_90
.address_size 64

// .visible .entry simtest_not_registered(
/* .entry simtest_also_not_registered( */

.visible .entry simtest_add(
	.param .align 8 .b8 simtest_add_param_0[16]
)
{
	ret;
}

.entry simtest_append(.param .align 8 .b8 p[8]) { ret; }
.visible .entry simtest_block(.param .align 8 .b8 p[8]) { ret; }
.visible .entry simtest_load(.param .align 8 .b8 p[16]) { ret; }
.visible .entry simtest_fail(.param .align 8 .b8 p[8]) { ret; }
`

var (
	appendMu  sync.Mutex
	appendLog []uint64
	gatesMu   sync.Mutex
	gates     = map[uint64]chan struct{}{}
	gateSeq   uint64
)

// testKernels are the kernels of the nodes of newNode.
var testKernels = map[string]KernelFunc{}

func init() {
	// simtest_add: params {addr, delta}: atomically adds delta (u32).
	testKernels["simtest_add"] = func(l *Launch) error {
		addr := binary.LittleEndian.Uint64(l.Params)
		delta := binary.LittleEndian.Uint64(l.Params[8:])
		_, err := l.Mem.AtomicAddU32(cuda.DevicePtr(addr), uint32(delta))
		return err
	}
	// simtest_append: params {v}: appends v to appendLog.
	testKernels["simtest_append"] = func(l *Launch) error {
		appendMu.Lock()
		appendLog = append(appendLog, binary.LittleEndian.Uint64(l.Params))
		appendMu.Unlock()
		return nil
	}
	// simtest_block: params {gate}: waits until the gate is opened.
	testKernels["simtest_block"] = func(l *Launch) error {
		gatesMu.Lock()
		ch := gates[binary.LittleEndian.Uint64(l.Params)]
		gatesMu.Unlock()
		<-ch
		return nil
	}
	// simtest_load: params {addr, n}: loads n bytes (to fault on purpose).
	testKernels["simtest_load"] = func(l *Launch) error {
		addr := binary.LittleEndian.Uint64(l.Params)
		k := binary.LittleEndian.Uint64(l.Params[8:])
		return l.Mem.Load(cuda.DevicePtr(addr), make([]byte, k))
	}
	// simtest_fail: returns an error that is not an illegal address.
	testKernels["simtest_fail"] = func(l *Launch) error {
		return errors.New("simtest_fail: assertion failed in block 3")
	}
}

func newGate() (uint64, func()) {
	gatesMu.Lock()
	defer gatesMu.Unlock()
	gateSeq++
	ch := make(chan struct{})
	gates[gateSeq] = ch
	var once sync.Once
	return gateSeq, func() { once.Do(func() { close(ch) }) }
}

func resetAppend() {
	appendMu.Lock()
	appendLog = nil
	appendMu.Unlock()
}

func appended() []uint64 {
	appendMu.Lock()
	defer appendMu.Unlock()
	return append([]uint64(nil), appendLog...)
}

func params(words ...uint64) []byte {
	b := make([]byte, 8*len(words))
	for i, w := range words {
		binary.LittleEndian.PutUint64(b[8*i:], w)
	}
	return b
}

// kernels loads testPTX on the current context and returns its functions.
type testFuncs struct {
	mod                             cuda.Module
	add, appendF, block, load, fail cuda.Function
}

func loadTestPTX(t testing.TB, n *Node) testFuncs {
	t.Helper()
	m, err := n.ModuleLoadData([]byte(testPTX + "\x00"))
	require.NoError(t, err)
	get := func(name string) cuda.Function {
		f, err := n.ModuleGetFunction(m, name)
		require.NoError(t, err)
		return f
	}
	return testFuncs{mod: m, add: get("simtest_add"), appendF: get("simtest_append"), block: get("simtest_block"), load: get("simtest_load"), fail: get("simtest_fail")}
}

func launch(t testing.TB, n *Node, f cuda.Function, s cuda.Stream, p []byte) {
	t.Helper()
	require.NoError(t, n.LaunchKernel(f, cuda.D1(1), cuda.D1(32), 0, s, unsafe.Pointer(&p[0]), uintptr(len(p))))
}

func ptr(b []byte) unsafe.Pointer { return unsafe.Pointer(&b[0]) }
