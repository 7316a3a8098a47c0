package nccl

import (
	"fmt"

	"github.com/nvls-go/nvls/internal/env"
)

// DataType is an ncclDataType_t (values of nccl.h, NCCL 2.x).
type DataType int32

// Data types.
const (
	Int8     DataType = 0
	Uint8    DataType = 1
	Int32    DataType = 2
	Uint32   DataType = 3
	Int64    DataType = 4
	Uint64   DataType = 5
	Float16  DataType = 6
	Float32  DataType = 7
	Float64  DataType = 8
	Bfloat16 DataType = 9
)

var dataTypeNames = map[DataType]string{
	Int8: "ncclInt8", Uint8: "ncclUint8", Int32: "ncclInt32", Uint32: "ncclUint32",
	Int64: "ncclInt64", Uint64: "ncclUint64", Float16: "ncclFloat16",
	Float32: "ncclFloat32", Float64: "ncclFloat64", Bfloat16: "ncclBfloat16",
}

func (t DataType) String() string {
	if n, ok := dataTypeNames[t]; ok {
		return n
	}
	return fmt.Sprintf("ncclDataType_t(%d)", int32(t))
}

// Size is the size of one element in bytes (0 for an unknown type).
func (t DataType) Size() int {
	switch t {
	case Int8, Uint8:
		return 1
	case Float16, Bfloat16:
		return 2
	case Int32, Uint32, Float32:
		return 4
	case Int64, Uint64, Float64:
		return 8
	}
	return 0
}

// RedOp is an ncclRedOp_t (the built-in operations).
type RedOp int32

// Reduction operations.
const (
	Sum  RedOp = 0
	Prod RedOp = 1
	Max  RedOp = 2
	Min  RedOp = 3
	Avg  RedOp = 4
)

func (o RedOp) String() string {
	switch o {
	case Sum:
		return "ncclSum"
	case Prod:
		return "ncclProd"
	case Max:
		return "ncclMax"
	case Min:
		return "ncclMin"
	case Avg:
		return "ncclAvg"
	}
	return fmt.Sprintf("ncclRedOp_t(%d)", int32(o))
}

// UniqueIDBytes is NCCL_UNIQUE_ID_BYTES.
const UniqueIDBytes = 128

// UniqueID is an ncclUniqueId: the rendezvous token that rank 0 makes
// (GetUniqueID) and every rank passes to CommInitRank.
type UniqueID struct {
	Internal [UniqueIDBytes]byte
}

// Comm is an ncclComm_t (a communicator handle; 0 is none).
type Comm uintptr

// VersionString turns ncclGetVersion's code into "major.minor.patch"
// (NCCL ≥ 2.9 codes are major*10000 + minor*100 + patch; older ones
// major*1000 + minor*100 + patch).
func VersionString(code int) string {
	if code <= 0 {
		return fmt.Sprintf("unknown(%d)", code)
	}
	if code >= 10000 {
		return fmt.Sprintf("%d.%d.%d", code/10000, code%10000/100, code%100)
	}
	return fmt.Sprintf("%d.%d.%d", code/1000, code%1000/100, code%100)
}

// EnvNVLSEnable is NCCL's NVLink SHARP switch.
const EnvNVLSEnable = env.NVLSEnable

// NVLSSetting describes NCCL_NVLS_ENABLE as NCCL will see it in this
// process: its value, or "unset (NCCL decides: NVLS where supported)"
// (NCCL, like nvls, takes an empty value for unset).
func NVLSSetting() string {
	v, ok := env.OS.String(EnvNVLSEnable)
	if !ok {
		return "unset (NCCL decides: NVLS where supported)"
	}
	return v
}
