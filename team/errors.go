package team

import (
	"errors"
	"fmt"
	"strings"
)

// ErrClosed: the team was closed.
var ErrClosed = errors.New("team: closed")

// ErrBroken matches Team.Err's error (and what later operations return)
// once Fail recorded a fatal error.
var ErrBroken = errors.New("team: broken")

// ErrNilDriver: New or NewRank was given a nil cuda.Driver.
var ErrNilDriver = errors.New("team: nil cuda.Driver")

// chain is an error of this package around another one: its own context,
// then the inner error's text without its "team: " prefix, so that a
// message says "team:" once. It matches what the inner error matches.
type chain struct {
	msg string
	err error
}

func (c *chain) Error() string { return c.msg }
func (c *chain) Unwrap() error { return c.err }

// wrap puts context (format, args) before err: "team: rank 1: map
// workspace: " + err, err's own "team: " dropped.
func wrap(err error, format string, args ...any) error {
	return &chain{msg: fmt.Sprintf(format, args...) + ": " + strings.TrimPrefix(err.Error(), "team: "), err: err}
}

// tagged is an error with its own text that matches err: for a sentinel
// whose text the message would only repeat.
func tagged(err error, format string, args ...any) error {
	return &chain{msg: fmt.Sprintf(format, args...), err: err}
}
