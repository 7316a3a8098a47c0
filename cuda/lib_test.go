package cuda_test

import (
	"errors"
	"fmt"
	"os"
	"reflect"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/nvls-go/nvls/cuda"
	"github.com/nvls-go/nvls/internal/env"
)

// unsetEnv removes key for the test and restores it afterwards.
func unsetEnv(t *testing.T, key string) {
	t.Helper()
	t.Setenv(key, "") // registers the restore
	require.NoError(t, os.Unsetenv(key))
}

// callAll calls every method of the Driver interface on d with zero
// arguments and returns the error each returned (Name excepted).
func callAll(t *testing.T, d cuda.Driver) map[string]error {
	t.Helper()
	errType := reflect.TypeOf((*error)(nil)).Elem()
	it := reflect.TypeOf((*cuda.Driver)(nil)).Elem()
	v := reflect.ValueOf(d)
	out := map[string]error{}
	for i := 0; i < it.NumMethod(); i++ {
		m := it.Method(i)
		if m.Name == "Name" {
			continue
		}
		args := make([]reflect.Value, m.Type.NumIn())
		for j := range args {
			args[j] = reflect.Zero(m.Type.In(j))
		}
		var res []reflect.Value
		require.NotPanics(t, func() { res = v.MethodByName(m.Name).Call(args) }, m.Name)
		last := res[len(res)-1]
		require.True(t, last.Type().Implements(errType), "%s returns an error last", m.Name)
		err, _ := last.Interface().(error)
		out[m.Name] = err
	}
	return out
}

func TestNotLoadedLib(t *testing.T) {
	unsetEnv(t, cuda.EnvNVLSEnable)
	for name, lib := range map[string]*cuda.Lib{"nil": nil, "zero": new(cuda.Lib)} {
		t.Run(name, func(t *testing.T) {
			assert.Equal(t, "cuda", lib.Name())
			errs := callAll(t, lib)
			assert.Len(t, errs, reflect.TypeOf((*cuda.Driver)(nil)).Elem().NumMethod()-1)
			for method, err := range errs {
				require.Error(t, err, method)
				assert.ErrorIs(t, err, cuda.ErrNoDriver, method)
				assert.NotErrorIs(t, err, cuda.ErrMulticastDisabled, method)
			}
			assert.NoError(t, lib.Close())
		})
	}
}

// TestNotLoadedMessages: an error of the binding says what happened once,
// named by its entry point (issue 15, item 10: a caller wrapping
// "cuInit: %w" around "cuInit: driver not loaded: cuda: no CUDA driver
// (libcuda.so.1 could not be loaded)" printed cuInit twice and the driver's
// absence twice). Callers add their own context, not the entry point's
// name: the error already carries it.
func TestNotLoadedMessages(t *testing.T) {
	unsetEnv(t, cuda.EnvNVLSEnable)
	var lib *cuda.Lib
	err := lib.Init()
	require.EqualError(t, err, "cuInit: no CUDA driver: the Lib was not loaded (cuda.Load)")
	assert.EqualError(t, fmt.Errorf("team: start: %w", err),
		"team: start: cuInit: no CUDA driver: the Lib was not loaded (cuda.Load)")
	for method, err := range callAll(t, lib) {
		msg := err.Error()
		op, _, ok := strings.Cut(msg, ": ")
		require.True(t, ok, "%s: %q", method, msg)
		assert.True(t, strings.HasPrefix(op, "cu"), "%s: %q begins with its entry point", method, msg)
		assert.Equal(t, 1, strings.Count(msg, op), "%s: %q names %s once", method, msg, op)
		assert.Equal(t, 1, strings.Count(msg, "no CUDA driver"), "%s: %q", method, msg)
		assert.NotContains(t, msg, "cuda: ", method)
	}
}

func TestMulticastCreateOffSwitch(t *testing.T) {
	prop := &cuda.MulticastProp{NumDevices: 8, Size: 1 << 30, HandleTypes: uint64(cuda.HandlePosixFD)}
	// 0 in NCCL's spellings, and a value that is not understood (issue 15:
	// "abc" left multicast on): refused, the latter naming the variable.
	for _, v := range []string{"0", "0x0", " 00 ", "false", "off", "abc", "1abc", "yes"} {
		t.Setenv(cuda.EnvNVLSEnable, v)
		for _, lib := range []*cuda.Lib{nil, new(cuda.Lib)} {
			h, err := lib.MulticastCreate(prop)
			require.ErrorIs(t, err, cuda.ErrMulticastDisabled, "NCCL_NVLS_ENABLE=%s", v)
			assert.NotErrorIs(t, err, cuda.ErrNoDriver, "refused before looking at the driver")
			assert.Zero(t, h)
			off, perr := cuda.MulticastDisabledByEnv()
			assert.True(t, off, "NCCL_NVLS_ENABLE=%q", v)
			if strings.Contains(v, "0") && !strings.Contains(v, "abc") {
				assert.NoError(t, perr)
				continue
			}
			require.Error(t, perr)
			var ee *env.Error
			require.ErrorAs(t, err, &ee)
			assert.Equal(t, perr.Error(), ee.Error())
			assert.Contains(t, err.Error(), fmt.Sprintf("NCCL_NVLS_ENABLE (a value not understood is off): NCCL_NVLS_ENABLE=%q: want an integer as NCCL reads it", v))
		}
	}
	// Without the variable (or with it on) the same call goes on to the
	// driver, which this Lib does not have.
	for _, v := range []string{"unset", "", "1", "2", "0x1"} {
		if v != "unset" {
			t.Setenv(cuda.EnvNVLSEnable, v)
		} else {
			unsetEnv(t, cuda.EnvNVLSEnable)
		}
		_, err := new(cuda.Lib).MulticastCreate(prop)
		require.Error(t, err)
		assert.NotErrorIs(t, err, cuda.ErrMulticastDisabled)
		assert.True(t, errors.Is(err, cuda.ErrNoDriver) || errors.Is(err, cuda.ErrNotSupported), "got %v", err)
	}
}

func TestOpenAndLoad(t *testing.T) {
	lib, err := cuda.Open()
	if err == nil {
		// A machine with a driver: the rest is the gpu tests' business.
		v, verr := lib.DriverVersion()
		require.NoError(t, verr)
		t.Logf("driver %d found", v)
		require.NoError(t, lib.Close())
	} else {
		require.ErrorIs(t, err, cuda.ErrNoDriver)
		assert.Nil(t, lib)
		assert.Equal(t, 1, strings.Count(err.Error(), cuda.LibraryName), "names the library once: %q", err)
		assert.Equal(t, 1, strings.Count(err.Error(), "no CUDA driver"), "%q", err)
		assert.True(t, strings.HasPrefix(err.Error(), "cuda: no CUDA driver: "), "%q", err)
		t.Logf("as expected without a driver: %v", err)
	}
	l1, err1 := cuda.Load()
	l2, err2 := cuda.Load()
	assert.Same(t, l1, l2, "Load shares one Lib")
	assert.Equal(t, err1, err2, "and one error")
	if err1 == nil {
		require.NoError(t, l1.Close(), "Close on the shared Lib is a no-op")
		_, err := l1.DeviceCount()
		assert.NoError(t, err, "the shared Lib still works after Close")
	} else {
		assert.ErrorIs(t, err1, cuda.ErrNoDriver)
	}
}
