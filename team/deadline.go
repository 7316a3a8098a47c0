package team

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/nvls-go/nvls/internal/deadline"
)

// hungGrace bounds how long New waits, once the setup deadline passed,
// for ranks that no other rank names as missing.
const hungGrace = 200 * time.Millisecond

// waitRanks waits for the n ranks' bring-ups (each sends its index on
// done once errs[index] is set) until ctx ends. After that it waits, at
// most grace more, for the ranks that the returned errors do not name as
// missing: a rank waiting in an exchange returns at once (the deadline
// broke it), a rank inside a driver call does not. It returns the ranks
// that had not returned, in order.
func waitRanks(ctx context.Context, done <-chan int, errs []error, grace time.Duration) []int {
	n := len(errs)
	returned := make([]bool, n)
	left := n
	for left > 0 {
		select {
		case i := <-done:
			returned[i] = true
			left--
			continue
		case <-ctx.Done():
		}
		break
	}
	if left > 0 {
		timer := time.NewTimer(grace)
		defer timer.Stop()
	wait:
		for left > 0 && !onlyMissingLeft(returned, errs) {
			select {
			case i := <-done:
				returned[i] = true
				left--
			case <-timer.C:
				break wait
			}
		}
	}
	var hung []int
	for i, ok := range returned {
		if !ok {
			hung = append(hung, i)
		}
	}
	return hung
}

// onlyMissingLeft reports whether every rank that has not returned is
// named missing by a returned rank's error.
func onlyMissingLeft(returned []bool, errs []error) bool {
	missing := map[int]bool{}
	for i, ok := range returned {
		var mr *MissingRanksError
		if ok && errors.As(errs[i], &mr) {
			for _, m := range mr.Missing {
				missing[m] = true
			}
		}
	}
	for i, ok := range returned {
		if !ok && !missing[i] {
			return false
		}
	}
	return true
}

// abandon ends a bring-up some ranks of which are hung in a driver call
// past the deadline: it tears down what the other ranks hold now, leaves
// the rest (and the hung ranks' workers) to a goroutine that waits for
// the hung ranks to return, and returns New's error.
func (t *Team) abandon(ctx context.Context, hung []int, errs []error, done <-chan int, timeout time.Duration) error {
	var live []*rank
	var liveErrs []error
	var devs []int
	for i, r := range t.ranks {
		if slices.Contains(hung, i) {
			devs = append(devs, int(r.dev))
			continue
		}
		live = append(live, r)
		liveErrs = append(liveErrs, errs[i])
	}
	// context.Cause names the setup deadline where it is the one that
	// passed; Explain names the caller's otherwise.
	err := deadline.Explain(ctx, fmt.Errorf("team: rank(s) %v (device(s) %v) still inside a driver call when the setup ended (timeout %v); what they hold is released when the call returns: %w",
		hung, devs, timeout, errors.Join(ErrPeerMissing, context.Cause(ctx))))
	if first := rootCause(liveErrs); first != nil {
		err = errors.Join(deadline.Explain(ctx, first), err)
	}
	if cerr := t.teardown(live, false); cerr != nil {
		err = errors.Join(err, cerr)
	}
	go func() {
		for range hung {
			<-done
		}
		if cerr := t.teardown(t.ranks, true); cerr != nil {
			t.log.Error("team: teardown after the hung ranks returned", "ranks", fmt.Sprint(hung), "err", cerr)
		}
	}()
	return err
}
