package nccl

import (
	"errors"
	"fmt"
)

// Result is an ncclResult_t.
type Result int32

// Result codes of nccl.h.
const (
	Success            Result = 0
	UnhandledCudaError Result = 1
	SystemError        Result = 2
	InternalError      Result = 3
	InvalidArgument    Result = 4
	InvalidUsage       Result = 5
	RemoteError        Result = 6
	InProgress         Result = 7
)

var resultNames = map[Result]string{
	Success:            "ncclSuccess",
	UnhandledCudaError: "ncclUnhandledCudaError",
	SystemError:        "ncclSystemError",
	InternalError:      "ncclInternalError",
	InvalidArgument:    "ncclInvalidArgument",
	InvalidUsage:       "ncclInvalidUsage",
	RemoteError:        "ncclRemoteError",
	InProgress:         "ncclInProgress",
}

func (r Result) String() string {
	if n, ok := resultNames[r]; ok {
		return n
	}
	return fmt.Sprintf("ncclResult_t(%d)", int32(r))
}

// Error is an NCCL call that returned something other than ncclSuccess.
type Error struct {
	// Op is the entry point, e.g. "ncclAllReduce".
	Op string
	// Code is the ncclResult_t.
	Code Result
	// Msg is ncclGetErrorString's text for Code, when the library gave one.
	Msg string
}

func (e *Error) Error() string {
	s := fmt.Sprintf("nccl: %s: %s (%d)", e.Op, e.Code, int32(e.Code))
	if e.Msg != "" {
		s += ": " + e.Msg
	}
	return s
}

// Is matches another *Error with no Op by code, so that
// errors.Is(err, nccl.ErrInvalidArgument) holds for any call that returned
// ncclInvalidArgument.
func (e *Error) Is(target error) bool {
	var t *Error
	if errors.As(target, &t) {
		return t.Op == "" && t.Code == e.Code
	}
	return false
}

// Sentinels: match with errors.Is.
var (
	// ErrNoNCCL: libnccl.so.2 could not be loaded (or lacks an entry
	// point this package needs).
	ErrNoNCCL = errors.New("nccl: libnccl.so.2 could not be loaded")
	// ErrClosed: the library handle was closed.
	ErrClosed = errors.New("nccl: library closed")

	ErrUnhandledCuda   error = &Error{Code: UnhandledCudaError}
	ErrSystem          error = &Error{Code: SystemError}
	ErrInternal        error = &Error{Code: InternalError}
	ErrInvalidArgument error = &Error{Code: InvalidArgument}
	ErrInvalidUsage    error = &Error{Code: InvalidUsage}
	ErrRemote          error = &Error{Code: RemoteError}
	ErrInProgress      error = &Error{Code: InProgress}
)
