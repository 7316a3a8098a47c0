package team

import (
	"errors"
	"fmt"
	"slices"
)

// Every resource a rank acquires pushes its own undo onto the rank's
// stack; teardown (on a failed bring-up, or Close) is those stacks run
// backwards.

// undo gives back one thing a rank acquired.
type undo struct {
	// level is the step that acquired it (its index in steps, from 1; 0
	// for the worker): teardown undoes a later step before an earlier one.
	level int
	// multicast: part of the multicast state, which a fallback to unicast
	// undoes on its own.
	multicast bool
	what      string // for errors, e.g. "unbind multicast memory"
	// fn gives the thing back. An error that matches errNotYet means it
	// must wait for another undo (of this rank or another one), not that
	// it failed. Once fn succeeded, or its thing is gone, it is not run
	// again.
	fn func() error
	// offWorker: run on the calling goroutine (the worker's own undo).
	offWorker bool
	// waits is the last errNotYet fn returned.
	waits error
}

// errNotYet: an undo must wait (see undo.fn).
var errNotYet = errors.New("not yet")

func notYet(format string, args ...any) error {
	return tagged(errNotYet, format, args...)
}

// push puts u on the rank's stack.
func (r *rank) push(u undo) { r.undos = append(r.undos, u) }

// undoWhere runs, last first, the rank's undos that match, on the calling
// goroutine (the rank's worker), and stops at the first that fails or
// must wait.
func (r *rank) undoWhere(match func(undo) bool) error {
	for i := len(r.undos) - 1; i >= 0; i-- {
		u := r.undos[i]
		if !match(u) {
			continue
		}
		if err := u.fn(); err != nil {
			return fmt.Errorf("%s: %w", u.what, err)
		}
		r.undos = slices.Delete(r.undos, i, i+1)
	}
	return nil
}

// teardown gives back what ranks hold: their stacks run backwards, the
// ranks in step with each other (every rank undoes a step before any rank
// undoes the one before it; the last rank first, the reverse of the order
// the stacks were filled in). What fails stays on its stack, and the
// stacks are run once more, so that one failed driver call does not leak
// what depends on it. Unless final (the team's last teardown, of all its
// ranks), what must wait for a rank that is not among ranks stays for
// the final one; a final teardown also closes the team's own bootstraps.
func (t *Team) teardown(ranks []*rank, final bool) error {
	errs := unwind(ranks)
	if len(errs) > 0 {
		if again := unwind(ranks); len(again) > 0 {
			errs = append(errs, fmt.Errorf("team: %s: retry: %w", stepTeardown, errors.Join(again...)))
		}
	}
	if !final {
		return errors.Join(errs...)
	}
	for _, r := range ranks {
		for _, u := range r.undos {
			if u.waits != nil {
				errs = append(errs, fmt.Errorf("team: rank %d (device %d): %s: %s: still held: %v", r.rank, r.dev, stepTeardown, u.what, u.waits))
			}
		}
	}
	for _, b := range t.boots {
		if err := b.Close(); err != nil {
			errs = append(errs, wrap(err, "team: close bootstrap"))
		}
	}
	t.boots = nil
	return errors.Join(errs...)
}

// unwind runs every rank's stack backwards once (see teardown).
func unwind(ranks []*rank) []error {
	top := 0
	for _, r := range ranks {
		for _, u := range r.undos {
			top = max(top, u.level)
		}
	}
	var errs []error
	for level := top; level >= 0; level-- {
		for i := len(ranks) - 1; i >= 0; i-- {
			errs = append(errs, ranks[i].undoLevel(level)...)
		}
	}
	return errs
}

// undoLevel runs the rank's undos of one level, last first; what fails or
// must wait stays on the stack.
func (r *rank) undoLevel(level int) []error {
	var errs []error
	for i := len(r.undos) - 1; i >= 0; i-- {
		u := &r.undos[i]
		if u.level != level {
			continue
		}
		var err error
		if u.offWorker {
			err = u.fn()
		} else {
			err = r.w.do(u.fn)
		}
		u.waits = nil
		switch {
		case err == nil:
			r.undos = slices.Delete(r.undos, i, i+1)
		case errors.Is(err, errNotYet):
			u.waits = err
		default:
			errs = append(errs, wrap(err, "team: rank %d (device %d): %s: %s", r.rank, r.dev, stepTeardown, u.what))
		}
	}
	return errs
}

// pushWorker puts the worker's own undo at the bottom of the rank's
// stack: it stops the worker (releasing its context) once the rank holds
// nothing else.
func (r *rank) pushWorker() {
	r.push(undo{what: "stop worker", offWorker: true, fn: func() error {
		if r.w == nil {
			return nil
		}
		if len(r.undos) > 1 {
			return notYet("the rank still holds %d other resource(s)", len(r.undos)-1)
		}
		err := r.w.stop()
		r.w = nil // stopped, whatever releasing the context returned
		return err
	}})
}
