package cuda

import (
	"errors"
	"fmt"
	"strings"
)

// Result is a CUresult.
type Result int32

// CUresult values this project names (CUDA 12/13 headers).
const (
	Success                 Result = 0
	ErrorInvalidValue       Result = 1
	ErrorOutOfMemory        Result = 2
	ErrorNotInitialized     Result = 3
	ErrorDeinitialized      Result = 4
	ErrorStubLibrary        Result = 34
	ErrorDeviceUnavailable  Result = 46
	ErrorNoDevice           Result = 100
	ErrorInvalidDevice      Result = 101
	ErrorInvalidImage       Result = 200
	ErrorInvalidContext     Result = 201
	ErrorNoBinaryForGPU     Result = 209
	ErrorInvalidPTX         Result = 218
	ErrorUnsupportedPTX     Result = 222
	ErrorInvalidHandle      Result = 400
	ErrorIllegalState       Result = 401
	ErrorNotFound           Result = 500
	ErrorNotReady           Result = 600
	ErrorIllegalAddress     Result = 700
	ErrorLaunchOutOfRes     Result = 701
	ErrorLaunchTimeout      Result = 702
	ErrorLaunchFailed       Result = 719
	ErrorNotPermitted       Result = 800
	ErrorNotSupported       Result = 801
	ErrorSystemNotReady     Result = 802
	ErrorSystemDriverMismat Result = 803
	ErrorCaptureUnsupported Result = 900
	ErrorCaptureInvalidated Result = 901
	ErrorCaptureUnjoined    Result = 904
	ErrorCaptureImplicit    Result = 906
	ErrorTimeout            Result = 909
	ErrorUnknown            Result = 999
)

var resultNames = map[Result]string{
	Success:                 "CUDA_SUCCESS",
	ErrorInvalidValue:       "CUDA_ERROR_INVALID_VALUE",
	ErrorOutOfMemory:        "CUDA_ERROR_OUT_OF_MEMORY",
	ErrorNotInitialized:     "CUDA_ERROR_NOT_INITIALIZED",
	ErrorDeinitialized:      "CUDA_ERROR_DEINITIALIZED",
	ErrorStubLibrary:        "CUDA_ERROR_STUB_LIBRARY",
	ErrorDeviceUnavailable:  "CUDA_ERROR_DEVICE_UNAVAILABLE",
	ErrorNoDevice:           "CUDA_ERROR_NO_DEVICE",
	ErrorInvalidDevice:      "CUDA_ERROR_INVALID_DEVICE",
	ErrorInvalidImage:       "CUDA_ERROR_INVALID_IMAGE",
	ErrorInvalidContext:     "CUDA_ERROR_INVALID_CONTEXT",
	ErrorNoBinaryForGPU:     "CUDA_ERROR_NO_BINARY_FOR_GPU",
	ErrorInvalidPTX:         "CUDA_ERROR_INVALID_PTX",
	ErrorUnsupportedPTX:     "CUDA_ERROR_UNSUPPORTED_PTX_VERSION",
	ErrorInvalidHandle:      "CUDA_ERROR_INVALID_HANDLE",
	ErrorIllegalState:       "CUDA_ERROR_ILLEGAL_STATE",
	ErrorNotFound:           "CUDA_ERROR_NOT_FOUND",
	ErrorNotReady:           "CUDA_ERROR_NOT_READY",
	ErrorIllegalAddress:     "CUDA_ERROR_ILLEGAL_ADDRESS",
	ErrorLaunchOutOfRes:     "CUDA_ERROR_LAUNCH_OUT_OF_RESOURCES",
	ErrorLaunchTimeout:      "CUDA_ERROR_LAUNCH_TIMEOUT",
	ErrorLaunchFailed:       "CUDA_ERROR_LAUNCH_FAILED",
	ErrorNotPermitted:       "CUDA_ERROR_NOT_PERMITTED",
	ErrorNotSupported:       "CUDA_ERROR_NOT_SUPPORTED",
	ErrorSystemNotReady:     "CUDA_ERROR_SYSTEM_NOT_READY",
	ErrorSystemDriverMismat: "CUDA_ERROR_SYSTEM_DRIVER_MISMATCH",
	ErrorCaptureUnsupported: "CUDA_ERROR_STREAM_CAPTURE_UNSUPPORTED",
	ErrorCaptureInvalidated: "CUDA_ERROR_STREAM_CAPTURE_INVALIDATED",
	ErrorCaptureUnjoined:    "CUDA_ERROR_STREAM_CAPTURE_UNJOINED",
	ErrorCaptureImplicit:    "CUDA_ERROR_STREAM_CAPTURE_IMPLICIT",
	ErrorTimeout:            "CUDA_ERROR_TIMEOUT",
	ErrorUnknown:            "CUDA_ERROR_UNKNOWN",
}

// KnownName is the CUDA_ERROR_... name of r from this package's table, or
// "" for a code the table lacks.
func (r Result) KnownName() string { return resultNames[r] }

func (r Result) String() string {
	if n := resultNames[r]; n != "" {
		return n
	}
	return fmt.Sprintf("CUresult(%d)", int32(r))
}

// Error is a driver call that returned something other than CUDA_SUCCESS.
type Error struct {
	// Op is the driver entry point, e.g. "cuMemMap".
	Op string
	// Code is the CUresult.
	Code Result
	// Name is the driver's name for Code (cuGetErrorName), e.g.
	// "CUDA_ERROR_INVALID_VALUE".
	Name string
	// Detail says more where there is more to say: the driver's own
	// description, the JIT error log, the rule the simulator enforced.
	Detail string
}

func (e *Error) Error() string {
	name := e.Name
	if name == "" {
		name = e.Code.String()
	}
	s := fmt.Sprintf("%s: %s (%d)", e.Op, name, int32(e.Code))
	if e.Detail != "" {
		s += ": " + e.Detail
	}
	return s
}

// Is matches another *Error by code, so that errors.Is(err, cuda.ErrNotReady)
// holds for any call that returned CUDA_ERROR_NOT_READY.
func (e *Error) Is(target error) bool {
	var t *Error
	if errors.As(target, &t) {
		return t.Op == "" && t.Code == e.Code
	}
	return false
}

// NewError builds the error for a failed call; the name comes from this
// package's table when the caller has none.
func NewError(op string, code Result, detail string) *Error {
	return &Error{Op: op, Code: code, Name: code.String(), Detail: detail}
}

// Sentinels: match with errors.Is. The *Error sentinels match any driver
// error of that code.
var (
	ErrInvalidValue    error = &Error{Code: ErrorInvalidValue}
	ErrOutOfMemory     error = &Error{Code: ErrorOutOfMemory}
	ErrNotInitialized  error = &Error{Code: ErrorNotInitialized}
	ErrInvalidDevice   error = &Error{Code: ErrorInvalidDevice}
	ErrInvalidContext  error = &Error{Code: ErrorInvalidContext}
	ErrInvalidHandle   error = &Error{Code: ErrorInvalidHandle}
	ErrIllegalState    error = &Error{Code: ErrorIllegalState}
	ErrNotFound        error = &Error{Code: ErrorNotFound}
	ErrNotReady        error = &Error{Code: ErrorNotReady}
	ErrIllegalAddress  error = &Error{Code: ErrorIllegalAddress}
	ErrNotPermitted    error = &Error{Code: ErrorNotPermitted}
	ErrDriverNotSupp   error = &Error{Code: ErrorNotSupported}
	ErrSystemNotReady  error = &Error{Code: ErrorSystemNotReady}
	ErrInvalidPTX      error = &Error{Code: ErrorInvalidPTX}
	ErrLaunchFailed    error = &Error{Code: ErrorLaunchFailed}
	ErrNoDevicePresent error = &Error{Code: ErrorNoDevice}
)

// Errors that come from this package, not from a driver call.
var (
	// ErrNoDriver: libcuda.so.1 could not be loaded (no NVIDIA driver on
	// this machine), cuInit found no usable driver, or the Lib called was
	// never loaded or was closed.
	ErrNoDriver = errors.New("cuda: " + noDriverText)
	// ErrNotSupported: the loaded driver lacks the entry point (too old for
	// it), or what was asked for is not available here.
	ErrNotSupported = errors.New("cuda: not supported by this driver")
	// ErrMulticastDisabled: multicast is switched off (NCCL_NVLS_ENABLE=0,
	// or a value of it that is not understood), so MulticastCreate refused
	// before calling the driver.
	ErrMulticastDisabled = errors.New("cuda: multicast disabled by NCCL_NVLS_ENABLE")
)

// noDriverText is ErrNoDriver's text without the package name, for the
// errors of calls, which begin with their entry point's name instead.
const noDriverText = "no CUDA driver"

// bindError is an error of the binding itself rather than of a driver
// call: no driver, or an entry point the driver lacks. Its text says what
// happened once (no sentinel text repeated inside it); errors.Is and
// errors.As look through to each of is.
type bindError struct {
	msg string
	is  []error
}

func (e *bindError) Error() string   { return e.msg }
func (e *bindError) Unwrap() []error { return e.is }

// noDriver is the error of an Open that found no usable driver at path:
// cause says why (the dynamic loader's message, a missing entry point, the
// *Error of cuInit).
func noDriver(path string, cause error) error {
	why := cause.Error()
	if !strings.Contains(why, path) {
		why = path + ": " + why
	}
	return &bindError{msg: ErrNoDriver.Error() + ": " + why, is: []error{ErrNoDriver, cause}}
}
