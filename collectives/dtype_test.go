package collectives

import (
	"encoding/json"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/nvls-go/nvls/kernels"
	"github.com/nvls-go/nvls/team"
)

func TestParseDType(t *testing.T) {
	for name, want := range map[string]DType{
		"f32": F32, "float": F32, "float32": F32, "F32": F32,
		"f16": F16, "half": F16, "float16": F16,
		"bf16": BF16, "bfloat16": BF16, "BFloat16": BF16,
		"s32": S32, "int32": S32, "int": S32, "i32": S32, "fp32": F32, "fp16": F16,
		"u32": U32, "uint32": U32,
		"u64": U64, "uint64": U64,
	} {
		got, err := ParseDType(name)
		require.NoError(t, err, name)
		assert.Equal(t, want, got, name)
	}
	for _, bad := range []string{"", "f64", "int8", "double", "int64"} {
		_, err := ParseDType(bad)
		assert.ErrorIs(t, err, ErrInvalid, bad)
		assert.ErrorContains(t, err, "f32|float|float32")
	}
}

func TestParseOp(t *testing.T) {
	for name, want := range map[string]Op{"sum": Sum, "SUM": Sum, "add": Sum, "min": Min, "max": Max} {
		got, err := ParseOp(name)
		require.NoError(t, err, name)
		assert.Equal(t, want, got)
	}
	for _, bad := range []string{"", "prod", "avg", "mul"} {
		_, err := ParseOp(bad)
		assert.ErrorIs(t, err, ErrInvalid, bad)
		assert.ErrorContains(t, err, "sum, min or max")
	}
}

// TestTypesAreKernels: DType and Op are package kernels' types (no
// conversion anywhere), with the names and sizes of its table.
func TestTypesAreKernels(t *testing.T) {
	var dt kernels.DType = F32
	var op kernels.RedOp = Max
	assert.Equal(t, "f32", dt.String())
	assert.Equal(t, "max", op.String())
	assert.Equal(t, kernels.DTypes, DTypes)
	assert.Equal(t, kernels.RedOps, Ops)
	for _, dt := range DTypes {
		assert.True(t, dt.Valid())
		assert.Positive(t, dt.Size())
	}
	assert.False(t, DType(len(DTypes)).Valid())
	assert.Equal(t, 0, DType(200).Size())
	assert.Equal(t, "DType(200)", DType(200).String())
	assert.Equal(t, "Op(9)", Op(9).String())
	assert.False(t, Supported(kernels.Multicast, F32, Max))
	assert.True(t, Supported(kernels.Unicast, F32, Max))
	assert.True(t, Supported(kernels.Multicast, BF16, Min))
	assert.Equal(t, kernels.Multicast, FlavorOf(team.Multicast))
	assert.Equal(t, kernels.Unicast, FlavorOf(team.Unicast))
}

func TestText(t *testing.T) {
	type cfg struct {
		T DType `json:"t"`
		O Op    `json:"o"`
	}
	b, err := json.Marshal(cfg{BF16, Max})
	require.NoError(t, err)
	assert.JSONEq(t, `{"t":"bf16","o":"max"}`, string(b))
	var c cfg
	require.NoError(t, json.Unmarshal([]byte(`{"t":"half","o":"min"}`), &c))
	assert.Equal(t, cfg{F16, Min}, c)
	assert.Error(t, json.Unmarshal([]byte(`{"t":"f64"}`), &c))
	_, err = json.Marshal(cfg{T: DType(9)})
	assert.Error(t, err)
}
