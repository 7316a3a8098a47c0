package multicast

import (
	"errors"
	"fmt"
)

// ErrOrder matches every call made out of the documented order (see the
// package documentation). Each such error also matches one of the more
// specific sentinels below.
var ErrOrder = errors.New("multicast: call out of order")

// The specific ordering rules. Each is matched by errors.Is on an
// *OrderError, together with ErrOrder.
var (
	// ErrClosed: the object was closed.
	ErrClosed = errors.New("object is closed")
	// ErrTooManyDevices: more devices added than the object was created for.
	ErrTooManyDevices = errors.New("more devices added than numDevices")
	// ErrAlreadyAdded: the device was already added.
	ErrAlreadyAdded = errors.New("device already added")
	// ErrAddAfterBind: a device added after memory was bound.
	ErrAddAfterBind = errors.New("device added after memory was bound")
	// ErrNotAllAdded: bind or map before every device was added.
	ErrNotAllAdded = errors.New("not every device has been added")
	// ErrNotAdded: the device named by a bind or map was not added here.
	ErrNotAdded = errors.New("device was not added to this object")
	// ErrNotBound: map before any memory was bound, or unbind of a range
	// that no bind made.
	ErrNotBound = errors.New("no such bound memory")
	// ErrStillMapped: unbind while a multicast mapping of this object is
	// still live.
	ErrStillMapped = errors.New("multicast mapping still live")
	// ErrNotMapped: unmap of an address no MapMC returned.
	ErrNotMapped = errors.New("no such multicast mapping")
)

// ErrInvalid matches arguments this package refuses before the driver is
// asked (zero sizes, ranges outside the object, unexported handle types).
var ErrInvalid = errors.New("multicast: invalid argument")

// OrderError is a call made out of order. It matches ErrOrder and Rule
// with errors.Is.
type OrderError struct {
	// Op is the method that was called, e.g. "Bind".
	Op string
	// Rule is the sentinel of the rule broken, e.g. ErrNotAllAdded.
	Rule error
	// Detail says more (counts, devices).
	Detail string
}

func (e *OrderError) Error() string {
	s := fmt.Sprintf("multicast: %s out of order: %v", e.Op, e.Rule)
	if e.Detail != "" {
		s += " (" + e.Detail + ")"
	}
	return s
}

// Unwrap returns ErrOrder and the rule, so that errors.Is matches both.
func (e *OrderError) Unwrap() []error { return []error{ErrOrder, e.Rule} }

func orderErr(op string, rule error, format string, args ...any) error {
	return &OrderError{Op: op, Rule: rule, Detail: fmt.Sprintf(format, args...)}
}

func invalid(op, format string, args ...any) error {
	return fmt.Errorf("multicast: %s: %w: %s", op, ErrInvalid, fmt.Sprintf(format, args...))
}
