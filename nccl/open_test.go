package nccl

// The tests that need no fake library: they run on every system (the
// fake's tests, lib_test.go and window_test.go, load it on Linux only).

import (
	"os"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestOpenMissingIsErrNoNCCL(t *testing.T) {
	_, err := OpenPath("libnccl-does-not-exist.so.2")
	require.Error(t, err)
	assert.ErrorIs(t, err, ErrNoNCCL)
	assert.Contains(t, err.Error(), "libnccl-does-not-exist.so.2")
}

func TestOpenWithoutNCCL(t *testing.T) {
	l, err := Open()
	if err == nil {
		_ = l.Close()
		t.Skip("libnccl.so.2 is installed here")
	}
	assert.ErrorIs(t, err, ErrNoNCCL)
}

func TestEnumValues(t *testing.T) {
	// nccl.h: ncclInt8=0 ... ncclBfloat16=9; ncclSum=0, ncclProd=1,
	// ncclMax=2, ncclMin=3, ncclAvg=4.
	assert.Equal(t, []int32{0, 1, 2, 3, 4, 5, 6, 7, 8, 9},
		[]int32{int32(Int8), int32(Uint8), int32(Int32), int32(Uint32), int32(Int64), int32(Uint64), int32(Float16), int32(Float32), int32(Float64), int32(Bfloat16)})
	assert.Equal(t, []int32{0, 1, 2, 3, 4}, []int32{int32(Sum), int32(Prod), int32(Max), int32(Min), int32(Avg)})
	assert.Equal(t, 2, Bfloat16.Size())
	assert.Equal(t, 8, Uint64.Size())
	assert.Equal(t, "ncclBfloat16", Bfloat16.String())
	assert.Equal(t, "2.18.1", VersionString(21801))
	assert.Equal(t, "2.8.4", VersionString(2804))
}

func TestNVLSSetting(t *testing.T) {
	t.Setenv(EnvNVLSEnable, "0")
	assert.Equal(t, "0", NVLSSetting())
	require.NoError(t, os.Unsetenv(EnvNVLSEnable))
	assert.Contains(t, NVLSSetting(), "unset")
}
