package multicast

import (
	"slices"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/nvls-go/nvls/cuda"
	"github.com/nvls-go/nvls/cuda/sim"
	"github.com/nvls-go/nvls/internal/posixfd"
)

// The fuzz program is a list of (op, arg) byte pairs run against two
// Objects sharing one multicast object of 3 devices, as the in-process team
// shares it: A created it and owns devices 0 and 1; B is attached and owns
// device 2. arg bit 0 picks the Object, (arg>>1)%3 the device, arg>>2 an
// index. The harness keeps the contracts a caller keeps (each device is
// added by its owner; ConfirmAllAdded only after every device was added
// somewhere; A closes after B); everything else is left to the Objects.
const (
	fzAdd = iota
	fzConfirm
	fzBind
	fzBindAddr
	fzMap
	fzUnmap
	fzUnbind
	fzClose
	fzExport
	fzFault
	fzOps
)

func FuzzStateMachine(f *testing.F) {
	// Also under testdata/fuzz/FuzzStateMachine.
	f.Add([]byte{fzAdd, 0, fzAdd, 2, fzAdd, 5, fzConfirm, 0, fzConfirm, 1, fzBind, 0, fzBind, 2, fzBindAddr, 5,
		fzMap, 0, fzMap, 5, fzUnmap, 0, fzUnmap, 1, fzUnbind, 0, fzUnbind, 2, fzUnbind, 5, fzClose, 1, fzClose, 0})
	f.Fuzz(func(t *testing.T, prog []byte) {
		if len(prog) > 512 {
			prog = prog[:512]
		}
		runProgram(t, prog)
	})
}

func runProgram(t *testing.T, prog []byte) (calls []sim.Call, mc uint64) {
	fx := newFixture(t, 3)
	d := fx.node
	d.ResetCalls()
	a, err := Create(d, 3, gran, cuda.HandlePosixFD)
	require.NoError(t, err)
	b, err := Attach(d, a.Handle(), 3, gran, cuda.HandlePosixFD)
	require.NoError(t, err)
	objs := [2]*Object{a, b}
	owner := [3]int{0, 0, 1}
	var maps [2][]cuda.DevicePtr
	closed := [2]bool{}
	for i := 0; i+1 < len(prog); i += 2 {
		op, arg := prog[i]%fzOps, prog[i+1]
		oi := int(arg & 1)
		o := objs[oi]
		dev := cuda.Device((arg >> 1) % 3)
		k := int(arg >> 2)
		switch op {
		case fzAdd:
			if owner[dev] == oi {
				_ = o.AddDevice(dev)
			}
		case fzConfirm:
			if len(a.Added())+len(b.Added()) == 3 {
				_ = o.ConfirmAllAdded()
			}
		case fzBind:
			if owner[dev] == oi {
				_ = o.Bind(dev, 0, fx.mem[dev], 0, gran)
			}
		case fzBindAddr:
			if owner[dev] == oi {
				_ = o.BindAddr(dev, 0, fx.uc[dev], gran)
			}
		case fzMap:
			if p, err := o.MapMC(dev); err == nil {
				maps[oi] = append(maps[oi], p)
			}
		case fzUnmap:
			if len(maps[oi]) == 0 {
				assert.ErrorIs(t, o.UnmapMC(0x1000), ErrOrder)
				continue
			}
			j := k % len(maps[oi])
			if o.UnmapMC(maps[oi][j]) == nil {
				maps[oi] = slices.Delete(maps[oi], j, j+1)
			}
		case fzUnbind:
			_ = o.Unbind(dev, 0, gran)
		case fzClose:
			if oi == 0 && !closed[1] {
				continue // the creator releases after every attached user
			}
			if o.Close() == nil {
				closed[oi] = true
			}
		case fzExport:
			if sh, err := o.Export(cuda.HandlePosixFD); err == nil {
				require.NoError(t, posixfd.Close(sh.FD))
			}
		case fzFault:
			d.ClearFaults()
			d.FailNth(int(arg%4)+1, cuda.ErrorUnknown)
		}
	}
	d.ClearFaults()
	// One Close undoes whatever was done; a Close that met an injected
	// failure is finished by the next.
	for _, o := range []*Object{b, a} {
		if err := o.Close(); err != nil {
			require.NoError(t, o.Close())
		}
	}
	calls = d.Calls()
	checkCalls(t, calls, uint64(a.Handle()), 3)
	fx.release(t) // checks that nothing leaked
	return calls, uint64(a.Handle())
}

// checkCalls checks the recorded driver calls: no call failed except by an
// injected fault (so no call reached the driver out of order), and the
// calls on the multicast handle come in the driver's order.
func checkCalls(t *testing.T, calls []sim.Call, mc uint64, numDevices int) {
	t.Helper()
	type bind struct {
		dev  int
		size uint64
	}
	adds := 0
	everBound := false
	var live []bind
	released := false
	for i, c := range calls {
		if c.Result != cuda.Success && !c.Injected {
			t.Fatalf("call %d %v failed without an injected fault: the Object let an out-of-order call through", i, c)
		}
		if c.Arg != mc || c.Result != cuda.Success {
			continue
		}
		if released {
			t.Fatalf("call %d %v after the handle was released", i, c)
		}
		switch c.Op {
		case "cuMulticastAddDevice":
			require.False(t, everBound, "call %d %v: add after a bind", i, c)
			adds++
		case "cuMulticastBindMem", "cuMulticastBindAddr":
			require.Equal(t, numDevices, adds, "call %d %v: bind before every device was added", i, c)
			everBound = true
			live = append(live, bind{c.Device, c.Size})
		case "cuMemMap":
			require.Equal(t, numDevices, adds, "call %d %v: map before every device was added", i, c)
			require.NotEmpty(t, live, "call %d %v: map with nothing bound", i, c)
		case "cuMulticastUnbind":
			j := slices.Index(live, bind{c.Device, c.Size})
			require.GreaterOrEqual(t, j, 0, "call %d %v: unbind of no bind", i, c)
			live = slices.Delete(live, j, j+1)
		case "cuMemRelease":
			released = true
		}
	}
	assert.True(t, released, "the multicast handle was never released")
	assert.Empty(t, live, "binds left")
}

// The committed seeds run as ordinary tests too (go test runs every file
// under testdata/fuzz/FuzzStateMachine); this one pins the happy path's
// calls so that the harness itself cannot silently do nothing.
func TestFuzzHarnessHappyPath(t *testing.T) {
	prog := []byte{fzAdd, 0, fzAdd, 2, fzAdd, 5, fzConfirm, 0, fzConfirm, 1, fzBind, 0, fzBind, 2, fzBindAddr, 5,
		fzMap, 0, fzMap, 5}
	calls, mc := runProgram(t, prog)
	count := map[string]int{}
	for _, c := range calls {
		if c.Arg == mc || c.Op == "cuMulticastCreate" || c.Op == "cuMulticastBindAddr" {
			count[c.Op]++
		}
	}
	assert.Equal(t, map[string]int{
		"cuMulticastCreate": 1, "cuMulticastAddDevice": 3, "cuMulticastBindMem": 2, "cuMulticastBindAddr": 1,
		"cuMemMap": 2, "cuMulticastUnbind": 3, "cuMemRelease": 1,
	}, count)
}

// An out-of-order program: the Objects refuse what the driver would.
func TestFuzzHarnessOutOfOrder(t *testing.T) {
	prog := []byte{fzBind, 0, fzMap, 0, fzAdd, 0, fzBind, 0, fzAdd, 2, fzUnbind, 0, fzAdd, 5, fzConfirm, 0,
		fzMap, 0, fzBind, 0, fzAdd, 0, fzClose, 0, fzClose, 1, fzClose, 0}
	calls, mc := runProgram(t, prog)
	binds := 0
	for _, c := range calls {
		if c.Op == "cuMulticastBindMem" && c.Arg == mc {
			binds++
		}
	}
	assert.Equal(t, 1, binds, "only the bind after every add and the confirm reaches the driver")
}
