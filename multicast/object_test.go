package multicast

import (
	"errors"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/nvls-go/nvls/cuda"
	"github.com/nvls-go/nvls/cuda/sim"
	"github.com/nvls-go/nvls/internal/posixfd"
)

const gran = 2 << 20

// fixture is a sim node with one physical allocation per device, each
// also mapped (UC) for BindAddr.
type fixture struct {
	node *sim.Node
	mem  []cuda.MemHandle
	uc   []cuda.DevicePtr
}

func newFixture(t testing.TB, devices int) *fixture {
	t.Helper()
	n := sim.New(sim.Config{Devices: devices})
	t.Cleanup(func() { _ = n.Close() })
	require.NoError(t, n.Init())
	f := &fixture{node: n}
	for d := 0; d < devices; d++ {
		prop := cuda.DeviceAllocationProp(cuda.Device(d), cuda.HandlePosixFD)
		h, err := n.MemCreate(gran, &prop)
		require.NoError(t, err)
		p, err := n.MemAddressReserve(gran, gran, 0)
		require.NoError(t, err)
		require.NoError(t, n.MemMap(p, gran, 0, h))
		require.NoError(t, n.MemSetAccess(p, gran, []cuda.AccessDesc{{Location: cuda.DeviceLocation(cuda.Device(d)), Flags: cuda.AccessReadWrite}}))
		f.mem = append(f.mem, h)
		f.uc = append(f.uc, p)
	}
	return f
}

// added is a new object of size bytes (no shareable handle) for two
// devices, with devices 0 and 1 added.
func (f *fixture) added(t testing.TB, size uint64) *Object {
	t.Helper()
	o, err := Create(f.node, 2, size, cuda.HandleNone)
	require.NoError(t, err)
	require.NoError(t, o.AddDevice(0))
	require.NoError(t, o.AddDevice(1))
	return o
}

// release frees the fixture's allocations and checks that nothing is left.
func (f *fixture) release(t testing.TB) {
	t.Helper()
	for d := range f.mem {
		require.NoError(t, f.node.MemUnmap(f.uc[d], gran))
		require.NoError(t, f.node.MemAddressFree(f.uc[d], gran))
		require.NoError(t, f.node.MemRelease(f.mem[d]))
	}
	require.NoError(t, f.node.CheckNoLeaks())
}

func TestLifecycle(t *testing.T) {
	f := newFixture(t, 4)
	d := f.node
	o, err := Create(d, 4, gran, cuda.HandlePosixFD)
	require.NoError(t, err)
	assert.Equal(t, Created, o.Origin())
	assert.Equal(t, 4, o.NumDevices())
	assert.Equal(t, uint64(gran), o.Size())
	assert.Equal(t, cuda.HandlePosixFD, o.HandleType())
	for dev := 0; dev < 4; dev++ {
		assert.False(t, o.AllAdded())
		require.NoError(t, o.AddDevice(cuda.Device(dev)))
	}
	assert.True(t, o.AllAdded())
	assert.Equal(t, []cuda.Device{0, 1, 2, 3}, o.Added())
	for dev := 0; dev < 3; dev++ {
		require.NoError(t, o.Bind(cuda.Device(dev), 0, f.mem[dev], 0, gran))
	}
	require.NoError(t, o.BindAddr(3, 0, f.uc[3], gran))
	assert.Equal(t, 4, o.Binds())
	p, err := o.MapMC(0, 1, 2, 3)
	require.NoError(t, err)
	assert.NotZero(t, p)
	assert.Equal(t, 1, o.Mappings())

	calls := d.Calls()
	var mc uint64
	for _, c := range calls {
		if c.Op == "cuMulticastAddDevice" {
			mc = c.Arg
		}
	}
	assert.Equal(t, uint64(o.Handle()), mc)

	require.NoError(t, o.UnmapMC(p))
	assert.Equal(t, 0, o.Mappings())
	require.NoError(t, o.Unbind(2, 0, gran))
	assert.Equal(t, 3, o.Binds())
	d.ResetCalls()
	require.NoError(t, o.Close())
	require.NoError(t, o.Close(), "second Close")
	// Close unbinds the remaining three in reverse, then releases.
	var ops []string
	for _, c := range d.Calls() {
		ops = append(ops, c.Op)
	}
	assert.Equal(t, []string{"cuMulticastUnbind", "cuMulticastUnbind", "cuMulticastUnbind", "cuMemRelease"}, ops)
	f.release(t)
}

// TestSeveralBindsPerDevice: a device may bind several non-overlapping
// ranges of the object (the driver allows it, and so does the simulator);
// a multicast store through the alias reaches every range of every
// device, and Close unbinds each bind.
func TestSeveralBindsPerDevice(t *testing.T) {
	f := newFixture(t, 2)
	d := f.node
	o := f.added(t, 2*gran)
	// Each device: its fixture memory at the first half, a second
	// allocation at the second half.
	var extra []cuda.MemHandle
	for dev := range 2 {
		prop := cuda.DeviceAllocationProp(cuda.Device(dev), cuda.HandleNone)
		h, err := d.MemCreate(gran, &prop)
		require.NoError(t, err)
		extra = append(extra, h)
		require.NoError(t, o.BindAddr(cuda.Device(dev), 0, f.uc[dev], gran))
		require.NoError(t, o.Bind(cuda.Device(dev), gran, h, 0, gran))
	}
	assert.ErrorIs(t, o.Bind(0, 0, extra[0], 0, 2*gran), ErrInvalid, "overlapping bind")
	assert.Equal(t, 4, o.Binds())
	assert.Equal(t, 4, d.Live().Binds)
	p, err := o.MapMC(0, 1)
	require.NoError(t, err)
	word := []byte{1, 2, 3, 4, 5, 6, 7, 8}
	require.NoError(t, d.Memory(1).MultimemStore(p+8, word))
	require.NoError(t, d.Memory(0).MultimemStore(p+gran+16, word))
	for dev := range 2 {
		got, err := d.ReadDevice(f.uc[dev]+8, 8)
		require.NoError(t, err)
		assert.Equal(t, word, got, "device %d, first half", dev)
	}
	got, err := d.Memory(0).MultimemLoad(p+gran+16, 8)
	require.NoError(t, err)
	assert.Equal(t, [][]byte{word, word}, got, "second half, every device")
	d.ResetCalls()
	require.NoError(t, o.Close())
	assert.Len(t, d.CallsOf("cuMulticastUnbind"), 4)
	for _, h := range extra {
		require.NoError(t, d.MemRelease(h))
	}
	f.release(t)
}

func TestCloseUndoesEverything(t *testing.T) {
	f := newFixture(t, 2)
	o := f.added(t, gran)
	require.NoError(t, o.Bind(0, 0, f.mem[0], 0, gran))
	require.NoError(t, o.Bind(1, 0, f.mem[1], 0, gran))
	_, err := o.MapMC(0)
	require.NoError(t, err)
	_, err = o.MapMC(1)
	require.NoError(t, err)
	f.node.ResetCalls()
	require.NoError(t, o.Close())
	var ops []string
	for _, c := range f.node.Calls() {
		ops = append(ops, c.Op)
	}
	assert.Equal(t, []string{"cuMemUnmap", "cuMemAddressFree", "cuMemUnmap", "cuMemAddressFree",
		"cuMulticastUnbind", "cuMulticastUnbind", "cuMemRelease"}, ops)
	f.release(t)
}

func TestCloseRetriesAfterFailure(t *testing.T) {
	for _, op := range []string{"cuMemUnmap", "cuMemAddressFree", "cuMulticastUnbind", "cuMemRelease"} {
		t.Run(op, func(t *testing.T) {
			f := newFixture(t, 2)
			o := f.added(t, gran)
			require.NoError(t, o.Bind(0, 0, f.mem[0], 0, gran))
			require.NoError(t, o.Bind(1, 0, f.mem[1], 0, gran))
			_, err := o.MapMC(0, 1)
			require.NoError(t, err)
			f.node.FailAt(op, 1, cuda.ErrorUnknown)
			err = o.Close()
			require.Error(t, err)
			assert.Contains(t, err.Error(), op)
			// Closed for use, but not done: a second Close finishes.
			_, err = o.MapMC(0)
			assert.ErrorIs(t, err, ErrClosed)
			require.NoError(t, o.Close())
			f.release(t)
		})
	}
}

func TestOrderRules(t *testing.T) {
	type step func(o *Object, f *fixture) error
	add := func(devs ...cuda.Device) step {
		return func(o *Object, _ *fixture) error {
			for _, d := range devs {
				if err := o.AddDevice(d); err != nil {
					return err
				}
			}
			return nil
		}
	}
	bind := func(dev cuda.Device) step {
		return func(o *Object, f *fixture) error { return o.Bind(dev, 0, f.mem[dev], 0, gran) }
	}
	mapmc := func(devs ...cuda.Device) step {
		return func(o *Object, _ *fixture) error { _, err := o.MapMC(devs...); return err }
	}
	confirm := func(o *Object, _ *fixture) error { return o.ConfirmAllAdded() }
	closeIt := func(o *Object, _ *fixture) error { return o.Close() }
	cases := []struct {
		name  string
		setup []step
		bad   step
		want  error
	}{
		{"bind before every device was added", []step{add(0, 1)}, bind(0), ErrNotAllAdded},
		{"bind-addr before every device was added", []step{add(0)}, func(o *Object, f *fixture) error { return o.BindAddr(0, 0, f.uc[0], gran) }, ErrNotAllAdded},
		{"map before every device was added", []step{add(0)}, mapmc(0), ErrNotAllAdded},
		{"map before bind", []step{add(0, 1, 2)}, mapmc(0), ErrNotBound},
		{"add after bind", []step{add(0, 1, 2), bind(0)}, add(3), ErrAddAfterBind},
		{"add after confirm", []step{add(0), confirm}, add(1), ErrAddAfterBind},
		{"add beyond numDevices", []step{add(0, 1, 2)}, add(3), ErrTooManyDevices},
		{"double add", []step{add(1)}, add(1), ErrAlreadyAdded},
		{"bind a device not added here", []step{add(0), confirm}, bind(1), ErrNotAdded},
		{"map for a device not added here", []step{add(0, 1, 2), bind(0)}, mapmc(0, 3), ErrNotAdded},
		{"confirm with nothing added", nil, confirm, ErrNotAdded},
		{"unbind what was not bound", []step{add(0, 1, 2), bind(0)}, func(o *Object, _ *fixture) error { return o.Unbind(1, 0, gran) }, ErrNotBound},
		{"unbind of another size", []step{add(0, 1, 2), bind(0)}, func(o *Object, _ *fixture) error { return o.Unbind(0, 0, gran/2) }, ErrNotBound},
		{"unbind while mapped", []step{add(0, 1, 2), bind(0), mapmc(0)}, func(o *Object, _ *fixture) error { return o.Unbind(0, 0, gran) }, ErrStillMapped},
		{"unmap of an unknown address", []step{add(0, 1, 2), bind(0), mapmc(0)}, func(o *Object, _ *fixture) error { return o.UnmapMC(0x1234) }, ErrNotMapped},
		{"add after close", []step{closeIt}, add(0), ErrClosed},
		{"bind after close", []step{add(0, 1, 2), closeIt}, bind(0), ErrClosed},
		{"map after close", []step{add(0, 1, 2), bind(0), closeIt}, mapmc(0), ErrClosed},
		{"export after close", []step{closeIt}, func(o *Object, _ *fixture) error { _, err := o.Export(cuda.HandlePosixFD); return err }, ErrClosed},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			f := newFixture(t, 4)
			o, err := Create(f.node, 3, gran, cuda.HandlePosixFD)
			require.NoError(t, err)
			for _, s := range c.setup {
				require.NoError(t, s(o, f))
			}
			before := f.node.CallCount()
			err = c.bad(o, f)
			require.Error(t, err)
			assert.ErrorIs(t, err, ErrOrder)
			assert.ErrorIs(t, err, c.want)
			var oe *OrderError
			require.ErrorAs(t, err, &oe)
			assert.Equal(t, c.want, oe.Rule)
			assert.Equal(t, before, f.node.CallCount(), "the driver was asked")
			require.NoError(t, o.Close())
			f.release(t)
		})
	}
}

func TestInvalidArguments(t *testing.T) {
	f := newFixture(t, 2)
	d := f.node
	for _, fn := range []func() error{
		func() error { _, err := Create(d, 0, gran, 0); return err },
		func() error { _, err := Create(d, 2, 0, 0); return err },
		func() error {
			_, err := Import(d, cuda.ShareableHandle{Type: cuda.HandlePosixFD, FD: -1}, 2, gran)
			return err
		},
		func() error { _, err := Import(d, cuda.ShareableHandle{Type: cuda.HandleWin32}, 2, gran); return err },
		func() error { _, err := Attach(d, 0, 2, gran, 0); return err },
	} {
		before := d.CallCount()
		err := fn()
		assert.ErrorIs(t, err, ErrInvalid)
		assert.Equal(t, before, d.CallCount())
	}
	o := f.added(t, gran)
	before := d.CallCount()
	assert.ErrorIs(t, o.Bind(0, gran, f.mem[0], 0, gran), ErrInvalid, "range outside")
	assert.ErrorIs(t, o.Bind(0, 0, f.mem[0], 0, 0), ErrInvalid, "zero size")
	assert.ErrorIs(t, o.Bind(0, 0, 0, 0, gran), ErrInvalid, "nil memory")
	assert.ErrorIs(t, o.BindAddr(0, 0, 0, gran), ErrInvalid, "nil address")
	_, err := o.MapMC()
	assert.ErrorIs(t, err, ErrOrder, "map before bind comes first")
	_, err = o.Export(cuda.HandlePosixFD)
	assert.ErrorIs(t, err, ErrInvalid, "not created exportable")
	assert.Equal(t, before, d.CallCount())
	require.NoError(t, o.Bind(0, 0, f.mem[0], 0, gran))
	assert.ErrorIs(t, o.BindAddr(0, 0, f.uc[0], gran), ErrInvalid, "overlapping bind of one device")
	_, err = o.MapMC()
	assert.ErrorIs(t, err, ErrInvalid, "no device to grant access")
	require.NoError(t, o.Close())
	f.release(t)
}

func TestExportImport(t *testing.T) {
	f := newFixture(t, 2)
	d := f.node
	creator, err := Create(d, 2, gran, cuda.HandlePosixFD)
	require.NoError(t, err)
	sh, err := creator.Export(cuda.HandlePosixFD)
	require.NoError(t, err)
	require.GreaterOrEqual(t, sh.FD, 0)
	imp, err := Import(d, sh, 2, gran)
	require.NoError(t, err)
	require.NoError(t, posixfd.Close(sh.FD), "the importer closes the FD once imported")
	assert.Equal(t, Imported, imp.Origin())
	assert.Equal(t, Created, creator.Origin())

	// Each "process" adds its own device, then after the barrier confirms.
	require.NoError(t, creator.AddDevice(0))
	require.NoError(t, imp.AddDevice(1))
	require.NoError(t, creator.ConfirmAllAdded())
	require.NoError(t, imp.ConfirmAllAdded())
	require.NoError(t, creator.Bind(0, 0, f.mem[0], 0, gran))
	require.NoError(t, imp.Bind(1, 0, f.mem[1], 0, gran))
	p0, err := creator.MapMC(0)
	require.NoError(t, err)
	p1, err := imp.MapMC(1)
	require.NoError(t, err)
	assert.NotEqual(t, p0, p1)
	// The importer releases its own reference; so does the creator.
	require.NoError(t, imp.Close())
	require.NoError(t, creator.Close())
	releases := 0
	for _, c := range d.CallsOf("cuMemRelease") {
		if c.Result == cuda.Success {
			releases++
		}
	}
	assert.Equal(t, 2, releases)
	f.release(t)
}

func TestAttachDoesNotRelease(t *testing.T) {
	f := newFixture(t, 2)
	d := f.node
	creator, err := Create(d, 2, gran, cuda.HandleNone)
	require.NoError(t, err)
	att, err := Attach(d, creator.Handle(), 2, gran, cuda.HandleNone)
	require.NoError(t, err)
	assert.Equal(t, Attached, att.Origin())
	require.NoError(t, creator.AddDevice(0))
	require.NoError(t, att.AddDevice(1))
	require.NoError(t, creator.ConfirmAllAdded())
	require.NoError(t, att.ConfirmAllAdded())
	require.NoError(t, creator.Bind(0, 0, f.mem[0], 0, gran))
	require.NoError(t, att.Bind(1, 0, f.mem[1], 0, gran))
	_, err = att.MapMC(1)
	require.NoError(t, err)
	d.ResetCalls()
	require.NoError(t, att.Close())
	assert.Empty(t, d.CallsOf("cuMemRelease"), "an attached object does not release the handle")
	require.NoError(t, creator.Close())
	assert.Len(t, d.CallsOf("cuMemRelease"), 1)
	f.release(t)
}

func TestMapMCUnwindsOnFailure(t *testing.T) {
	for _, op := range []string{"cuMulticastGetGranularity", "cuMemAddressReserve", "cuMemMap", "cuMemSetAccess"} {
		t.Run(op, func(t *testing.T) {
			f := newFixture(t, 2)
			o := f.added(t, gran)
			require.NoError(t, o.Bind(0, 0, f.mem[0], 0, gran))
			f.node.FailAt(op, 1, cuda.ErrorOutOfMemory)
			_, err := o.MapMC(0)
			require.Error(t, err)
			assert.ErrorIs(t, err, cuda.ErrOutOfMemory)
			assert.Equal(t, 0, o.Mappings())
			live := f.node.Live()
			assert.Equal(t, 2, live.Reservations, "only the fixture's ranges")
			assert.Equal(t, 2, live.Mappings, "only the fixture's mappings")
			require.NoError(t, o.Close())
			f.release(t)
		})
	}
}

func TestDriverErrorsWrapped(t *testing.T) {
	f := newFixture(t, 2)
	f.node.FailAt("cuMulticastCreate", 1, cuda.ErrorOutOfMemory)
	_, err := Create(f.node, 2, gran, cuda.HandleNone)
	require.Error(t, err)
	var ce *cuda.Error
	require.True(t, errors.As(err, &ce))
	assert.Equal(t, "cuMulticastCreate", ce.Op)
	assert.NotErrorIs(t, err, ErrOrder)
	f.release(t)
}
