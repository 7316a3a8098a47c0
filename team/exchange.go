package team

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
)

// The exchange that ends every step of the bring-up: each rank all-gathers
// its outcome of the step (and what the step sends), so that every rank
// sees the same outcomes and stops, goes on or falls back at the same
// step.

// ErrPeerFailed matches the error a rank returns when another rank's
// setup step failed (*PeerError).
var ErrPeerFailed = errors.New("team: another rank failed")

// PeerError is what a rank returns when its own steps went fine but
// another rank's failed: all ranks stop at the same step and unwind.
type PeerError struct {
	Rank int
	Step string
	Msg  string
}

func (e *PeerError) Error() string {
	return fmt.Sprintf("team: rank %d failed at step %q: %s", e.Rank, e.Step, e.Msg)
}

// Unwrap makes errors.Is(err, ErrPeerFailed) hold.
func (e *PeerError) Unwrap() error { return ErrPeerFailed }

// Outcomes of a step, the first byte of each rank's message.
const (
	outcomeOK       = 0
	outcomeFailed   = 1
	outcomeFallback = 2 // a FabricError where the team may fall back
	outcomeRetry    = 3 // a transient FabricError: retry the step
)

// exchange all-gathers this rank's outcome of step (local: nil, or its
// error) and payload. When every rank succeeded it returns every rank's
// payload. When a rank failed, every rank returns an error: its own, or a
// PeerError naming the first rank that failed. With canFallBack, a local
// *FabricError asks for the fallback: when no rank failed otherwise and
// some rank asked, every rank returns the same FabricError (the lowest
// rank's) and no error, and must then fall back to unicast. With
// canRetry, a local transient *FabricError asks for a retry: when no rank
// failed or asked for the fallback, and some rank asked for a retry, every
// rank returns the lowest such rank's FabricError, marked retry, and must
// then run the step again.
func exchange(ctx context.Context, boot Bootstrap, step string, local error, payload []byte, canFallBack, canRetry bool) ([][]byte, *FabricError, error) {
	msg, localFabric := outcome(local, payload, canFallBack, canRetry)
	all, err := boot.AllGather(ctx, msg)
	if err != nil {
		return nil, nil, errors.Join(local, wrap(err, "team: rank %d: %s", boot.Rank(), step))
	}
	var fallback, retry []int
	for r, m := range all {
		switch {
		case len(m) == 0:
			return nil, nil, errors.Join(local, fmt.Errorf("team: rank %d: %s: empty message from rank %d", boot.Rank(), step, r))
		case m[0] == outcomeOK:
		case m[0] == outcomeFallback:
			fallback = append(fallback, r)
		case m[0] == outcomeRetry:
			retry = append(retry, r)
		case local != nil && localFabric == nil:
			return nil, nil, local // this rank's own failure
		case local != nil:
			// This rank's fabric error is not why the team stops.
			return nil, nil, errors.Join(&PeerError{Rank: r, Step: step, Msg: string(m[1:])}, local)
		default:
			return nil, nil, &PeerError{Rank: r, Step: step, Msg: string(m[1:])}
		}
	}
	for _, ranks := range [][]int{fallback, retry} {
		if len(ranks) == 0 {
			continue
		}
		var w fabricWire
		if err := json.Unmarshal(all[ranks[0]][1:], &w); err != nil {
			return nil, nil, fmt.Errorf("team: rank %d: %s: fabric error of rank %d: %w", boot.Rank(), step, ranks[0], err)
		}
		fabric := w.fabricError()
		fabric.failed = ranks
		fabric.retry = len(fallback) == 0
		return nil, fabric, nil
	}
	out := make([][]byte, len(all))
	for r, m := range all {
		out[r] = m[1:]
	}
	return out, nil, nil
}

// outcome is this rank's message: the outcome byte, then the payload, the
// error's text or the FabricError on the wire. It returns the local
// FabricError when it asks for the fallback or a retry.
func outcome(local error, payload []byte, canFallBack, canRetry bool) ([]byte, *FabricError) {
	var fabric *FabricError
	switch {
	case local == nil:
		return append([]byte{outcomeOK}, payload...), nil
	case !errors.As(local, &fabric):
	case canRetry && fabric.transient():
		w, _ := json.Marshal(fabric.wire()) // strings and integers: cannot fail
		return append([]byte{outcomeRetry}, w...), fabric
	case canFallBack:
		w, _ := json.Marshal(fabric.wire())
		return append([]byte{outcomeFallback}, w...), fabric
	}
	return append([]byte{outcomeFailed}, local.Error()...), nil
}

// failEarly takes part in the first exchange with an error, for a rank
// that cannot even start, so that the others stop instead of waiting.
func failEarly(ctx context.Context, boot Bootstrap, err error) error {
	_, _, xerr := exchange(ctx, boot, stepQuery, err, nil, false, false)
	return xerr
}
