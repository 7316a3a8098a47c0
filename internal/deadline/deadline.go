// Package deadline says which deadline ended an operation: one nvls set
// from a setting (NVLS_SETUP_TIMEOUT, an option, a default), named with
// its value, or the caller's context's. "context deadline exceeded" alone
// does not tell a user which knob to turn.
package deadline

import (
	"context"
	"errors"
	"fmt"
	"time"
)

// Cause is the cause (context.Cause) of a context that a deadline of
// WithTimeout ended: what the deadline is ("setup deadline") and where it
// came from ("NVLS_SETUP_TIMEOUT=1ns"). It matches
// context.DeadlineExceeded.
type Cause struct {
	What, Source string
	d            time.Duration
	at           time.Time
}

func (c *Cause) Error() string { return context.DeadlineExceeded.Error() + " (" + c.note() + ")" }

// Unwrap makes errors.Is(err, context.DeadlineExceeded) hold.
func (c *Cause) Unwrap() error { return context.DeadlineExceeded }

func (c *Cause) note() string { return c.What + " " + c.Source }

type key struct{}

// WithTimeout is context.WithTimeout with a *Cause naming the deadline:
// Explain then says which deadline an error came from.
func WithTimeout(parent context.Context, d time.Duration, what, source string) (context.Context, context.CancelFunc) {
	c := &Cause{What: what, Source: source, d: d, at: time.Now().Add(d)}
	ctx, cancel := context.WithDeadlineCause(parent, c.at, c)
	return context.WithValue(ctx, key{}, c), cancel
}

// Explain adds to err, where it matches context.DeadlineExceeded, which
// of ctx's deadlines it is: the one WithTimeout set (its What and
// Source), or else the caller's, which came first. It returns other
// errors, and those that name the deadline already, as they are; the
// result matches what err matches.
func Explain(ctx context.Context, err error) error {
	if err == nil || !errors.Is(err, context.DeadlineExceeded) {
		return err
	}
	var x *explained
	var c *Cause
	if errors.As(err, &x) || errors.As(err, &c) {
		return err
	}
	dl, ok := ctx.Deadline()
	if !ok {
		return err
	}
	own, _ := ctx.Value(key{}).(*Cause)
	var note string
	switch {
	case own != nil && dl.Equal(own.at):
		note = own.note()
	case own != nil:
		note = fmt.Sprintf("the caller's context deadline, earlier than the %s of %v", own.What, own.d)
	default:
		note = "the caller's context deadline"
	}
	return &explained{err: err, note: note}
}

// explained is an error with the deadline that ended it said after it.
type explained struct {
	err  error
	note string
}

func (e *explained) Error() string { return e.err.Error() + " (" + e.note + ")" }
func (e *explained) Unwrap() error { return e.err }
