package multicast_test

import (
	"errors"
	"fmt"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/nvls-go/nvls/cuda"
	"github.com/nvls-go/nvls/cuda/sim"
	"github.com/nvls-go/nvls/multicast"
)

func TestDiagnose(t *testing.T) {
	mcOps := []string{"cuMulticastGetGranularity", "cuMulticastCreate", "cuMulticastAddDevice", "cuMulticastBindMem", "cuMulticastBindAddr"}
	otherOps := []string{"cuMemMap", "cuMemAddressReserve", "cuMemExportToShareableHandle", "cuMemImportFromShareableHandle"}
	for _, c := range []struct {
		code      cuda.Result
		mc, other bool   // diagnosed from a cuMulticast* entry point, from another call
		word      string // in Likely
	}{
		{cuda.ErrorSystemNotReady, true, true, "Fabric Manager (nvidia-fabricmanager) is not running"},
		{cuda.ErrorIllegalState, true, true, "NVSwitches are not in a state that allows multicast"},
		{cuda.ErrorNotSupported, true, false, "NVLink SHARP"},
		{cuda.ErrorOutOfMemory, true, false, "128 on HGX H100/H200"},
		{cuda.ErrorInvalidValue, false, false, ""},
		{cuda.ErrorUnknown, false, false, ""},
		{cuda.ErrorInvalidHandle, false, false, ""},
	} {
		check := func(op string, want bool) {
			// Wrapped as the layers above wrap it, and joined with another.
			err := fmt.Errorf("multicast: bind: %w", errors.Join(cuda.NewError(op, c.code, "detail"), errors.New("free range: ok")))
			d, ok := multicast.Diagnose(err, cuda.HandlePosixFD)
			require.Equal(t, want, ok, "%s %v", op, c.code)
			if !ok {
				assert.Equal(t, multicast.Diagnosis{}, d)
				return
			}
			assert.Equal(t, op, d.Op)
			assert.Equal(t, c.code, d.Code)
			assert.Contains(t, d.Likely, c.word)
			assert.NotContains(t, d.Likely, "IMEX", "no fabric handles here")
			assert.NotEmpty(t, d.Check)
			assert.Equal(t, fmt.Sprintf("%s: %s (%d)", op, c.code.String(), int32(c.code)), d.Cause())
		}
		for _, op := range mcOps {
			check(op, c.mc)
		}
		for _, op := range otherOps {
			check(op, c.other)
		}
	}
	// INVALID_DEVICE: cliques, from the add and the object's mapping only.
	for op, want := range map[string]bool{"cuMulticastAddDevice": true, "cuMemMap": true, "cuMulticastBindMem": false,
		"cuMulticastCreate": false, "cuMemImportFromShareableHandle": false, "cuMemSetAccess": false} {
		d, ok := multicast.Diagnose(fmt.Errorf("wrapped: %w", cuda.NewError(op, cuda.ErrorInvalidDevice, "")), cuda.HandlePosixFD)
		require.Equal(t, want, ok, op)
		if ok {
			assert.Contains(t, d.Likely, "NVLink clique", op)
			assert.Contains(t, d.Check, "CliqueId", op)
		}
	}
	// Fabric handles: NOT_SUPPORTED also names IMEX.
	d, ok := multicast.Diagnose(cuda.NewError("cuMulticastCreate", cuda.ErrorNotSupported, ""), cuda.HandleFabric)
	require.True(t, ok)
	assert.Contains(t, d.Likely, "IMEX")
	// Not a driver error at all.
	_, ok = multicast.Diagnose(errors.New("CUDA_ERROR_SYSTEM_NOT_READY"), cuda.HandleNone)
	assert.False(t, ok)
	_, ok = multicast.Diagnose(nil, cuda.HandleNone)
	assert.False(t, ok)
	_, ok = multicast.Diagnose(cuda.ErrMulticastDisabled, cuda.HandleNone)
	assert.False(t, ok)
}

// TestDiagnoseSimErrors: the errors Object's methods return from the
// sim's driver are diagnosed through their wrapping.
func TestDiagnoseSimErrors(t *testing.T) {
	d := sim.New(sim.Config{Devices: 2, MaxMulticastObjects: 1})
	defer d.Close()
	require.NoError(t, d.Init())
	o, err := multicast.Create(d, 2, 2<<20, cuda.HandleNone)
	require.NoError(t, err)
	_, err = multicast.Create(d, 2, 2<<20, cuda.HandleNone)
	require.Error(t, err)
	diag, ok := multicast.Diagnose(err, cuda.HandleNone)
	require.True(t, ok, "%v", err)
	assert.Equal(t, "cuMulticastCreate", diag.Op)
	assert.Equal(t, cuda.ErrorOutOfMemory, diag.Code)

	d.FailAt("cuMulticastAddDevice", 1, cuda.ErrorSystemNotReady)
	err = o.AddDevice(1)
	diag, ok = multicast.Diagnose(err, cuda.HandleNone)
	require.True(t, ok, "%v", err)
	assert.Equal(t, cuda.ErrorSystemNotReady, diag.Code)
	assert.Empty(t, o.Added(), "a failed add is not in the books")
	require.NoError(t, o.Close())
	require.NoError(t, d.CheckNoLeaks())
}

// Diagnose says what a driver error of a multicast setup likely means and
// what to check: here, the Fabric Manager not being up.
func ExampleDiagnose() {
	err := fmt.Errorf("multicast: bind memory of device 3: %w",
		cuda.NewError("cuMulticastBindMem", cuda.ErrorSystemNotReady, ""))
	d, ok := multicast.Diagnose(err, cuda.HandlePosixFD)
	fmt.Println(ok, d.Cause())
	fmt.Println(d.Likely)
	fmt.Println(d.Check)
	// Output:
	// true cuMulticastBindMem: CUDA_ERROR_SYSTEM_NOT_READY (802)
	// the NVSwitch fabric is not ready: the Fabric Manager (nvidia-fabricmanager) is not running, or has not (yet) registered this GPU with the fabric; a Fabric Manager that stalls while it forms the multicast team gives this error too, and then a retry may pass
	// `systemctl status nvidia-fabricmanager` (it must run, at the driver's version); `nvidia-smi -q | grep -i -A 3 fabric` should say State: Completed and Status: Success on every GPU
}
