//go:build cgo

package main

import (
	"context"
	"errors"
	"fmt"

	"github.com/nvls-go/nvls/collectives"
	"github.com/nvls-go/nvls/nccl"
	"github.com/nvls-go/nvls/team"
	"github.com/nvls-go/nvls/team/sock"
)

// callError is a failed call: the ncclResult_t it returns and why.
type callError struct {
	code nccl.Result
	err  error
}

func (e *callError) Error() string { return e.err.Error() }
func (e *callError) Unwrap() error { return e.err }

// fail makes a callError with code.
func fail(code nccl.Result, format string, args ...any) error {
	return &callError{code: code, err: fmt.Errorf(format, args...)}
}

// codeOf is the ncclResult_t for err.
func codeOf(err error) nccl.Result {
	var ce *callError
	switch {
	case err == nil:
		return nccl.Success
	case errors.As(err, &ce):
		return ce.code
	case errors.Is(err, sock.ErrBadID), errors.Is(err, collectives.ErrInvalid):
		return nccl.InvalidArgument
	case errors.Is(err, collectives.ErrTimeout), errors.Is(err, team.ErrPeerMissing),
		errors.Is(err, team.ErrPeerFailed), errors.Is(err, sock.ErrRefused), errors.Is(err, sock.ErrStaleID),
		errors.Is(err, context.DeadlineExceeded):
		return nccl.RemoteError
	case errors.Is(err, collectives.ErrClosed), errors.Is(err, team.ErrClosed):
		return nccl.InvalidUsage
	}
	return nccl.SystemError
}
