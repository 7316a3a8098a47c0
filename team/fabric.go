package team

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"

	"github.com/nvls-go/nvls/cuda"
	"github.com/nvls-go/nvls/kernels"
	"github.com/nvls-go/nvls/multicast"
)

// ErrFabricNotReady matches a *FabricError: a driver call of the
// multicast part of the bring-up failed in a way that means the NVSwitch
// fabric cannot serve multicast now (Fabric Manager down, NVSwitch not in
// a ready state, multicast slots exhausted, ...).
var ErrFabricNotReady = errors.New("team: multicast fabric not ready")

// remedy is what a FabricError advises besides the diagnosis's check.
const remedy = "to run without multicast, set " + EnvTransport + "=unicast (or pass WithTransport(Unicast))"

// FabricError is a driver error of the multicast part of the bring-up
// that says the fabric is not ready for multicast, with what is likely
// wrong and what to do. It matches ErrFabricNotReady and, through Cause,
// the driver's error (errors.Is(err, cuda.ErrSystemNotReady), errors.As
// to *cuda.Error).
//
// When the transport was chosen automatically, such an error on any rank
// makes every rank fall back to unicast (Team.Fallback returns it);
// when multicast was asked for, it is New's (or NewRank's) error.
type FabricError struct {
	// Step is the setup step, e.g. "bind multicast memory".
	Step string
	// Rank and Device: where it failed.
	Rank   int
	Device cuda.Device
	// Op and Code: the driver call that failed and its result.
	Op   string
	Code cuda.Result
	// Cause is the error as the failing rank saw it (it wraps the
	// driver's *cuda.Error).
	Cause error
	// Likely says what is likely wrong; Remedy what to do.
	Likely string
	Remedy string

	// failed: every rank where multicast failed at that step (known
	// after the exchange).
	failed []int
}

func (e *FabricError) Error() string {
	return fmt.Sprintf("team: rank %d (device %d): %s: multicast fabric not ready: %v. Likely: %s. What to do: %s",
		e.Rank, e.Device, e.Step, e.Cause, e.Likely, e.Remedy)
}

// Unwrap returns ErrFabricNotReady and the cause.
func (e *FabricError) Unwrap() []error { return []error{ErrFabricNotReady, e.Cause} }

// DriverCall is the failed call and its result, e.g.
// "cuMulticastBindMem: CUDA_ERROR_SYSTEM_NOT_READY (802)".
func (e *FabricError) DriverCall() string {
	return fmt.Sprintf("%s: %s (%d)", e.Op, e.Code, int32(e.Code))
}

// fabricWire is a FabricError as it travels between ranks.
type fabricWire struct {
	Step   string
	Rank   int
	Device int32
	Op     string
	Code   int32
	Detail string
	Cause  string
	Likely string
	Remedy string
}

// wireCause is a FabricError's cause rebuilt from the wire: the failing
// rank's text, wrapping an equivalent driver error.
type wireCause struct {
	msg string
	drv *cuda.Error
}

func (c *wireCause) Error() string { return c.msg }
func (c *wireCause) Unwrap() error { return c.drv }

func (e *FabricError) wire() fabricWire {
	w := fabricWire{Step: e.Step, Rank: e.Rank, Device: int32(e.Device), Op: e.Op, Code: int32(e.Code),
		Cause: e.Cause.Error(), Likely: e.Likely, Remedy: e.Remedy}
	var ce *cuda.Error
	if errors.As(e.Cause, &ce) {
		w.Detail = ce.Detail
	}
	return w
}

func (w fabricWire) fabricError() *FabricError {
	drv := cuda.NewError(w.Op, cuda.Result(w.Code), w.Detail)
	return &FabricError{Step: w.Step, Rank: w.Rank, Device: cuda.Device(w.Device), Op: w.Op, Code: cuda.Result(w.Code),
		Cause: &wireCause{msg: w.Cause, drv: drv}, Likely: w.Likely, Remedy: w.Remedy}
}

// mcFail wraps an error of a multicast step: a *FabricError when the
// driver said the fabric is not ready, else the usual step error.
func (b *bringup) mcFail(step string, err error) error {
	d, ok := multicast.Diagnose(err, b.sh.handles)
	if !ok {
		return b.fail(step, err)
	}
	return &FabricError{Step: step, Rank: b.r.rank, Device: b.r.dev, Op: d.Op, Code: d.Code, Cause: err,
		Likely: d.Likely, Remedy: d.Check + "; " + remedy}
}

// Outcomes of a step, the first byte of each rank's message.
const (
	outcomeOK       = 0
	outcomeFailed   = 1
	outcomeFallback = 2 // a FabricError where the team may fall back
)

// exchangeFB all-gathers this rank's outcome of a step with a payload.
// With canFallBack, a local *FabricError is sent as a fallback request:
// when no rank failed otherwise and some asked for the fallback, every
// rank returns the same FabricError (the lowest rank's) and no error, and
// must then fall back. Otherwise, as exchange.
func exchangeFB(ctx context.Context, boot Bootstrap, step string, local error, payload []byte, canFallBack bool) ([][]byte, *FabricError, error) {
	var msg []byte
	var localFE *FabricError
	switch {
	case local == nil:
		msg = append([]byte{outcomeOK}, payload...)
	case canFallBack && errors.As(local, &localFE):
		w, err := json.Marshal(localFE.wire())
		if err != nil {
			local = errors.Join(local, err)
			localFE = nil
			msg = append([]byte{outcomeFailed}, local.Error()...)
			break
		}
		msg = append([]byte{outcomeFallback}, w...)
	default:
		msg = append([]byte{outcomeFailed}, local.Error()...)
	}
	all, err := boot.AllGather(ctx, msg)
	if err != nil {
		err = fmt.Errorf("team: rank %d: %s: bootstrap: %w", boot.Rank(), step, err)
		if local != nil {
			return nil, nil, errors.Join(local, err)
		}
		return nil, nil, err
	}
	var fallback []int
	for r, m := range all {
		if len(m) == 0 {
			err := fmt.Errorf("team: rank %d: %s: empty message from rank %d", boot.Rank(), step, r)
			return nil, nil, errors.Join(local, err)
		}
		switch m[0] {
		case outcomeOK:
		case outcomeFallback:
			fallback = append(fallback, r)
		default:
			if local != nil && localFE == nil {
				return nil, nil, local
			}
			pe := &PeerError{Rank: r, Step: step, Msg: string(m[1:])}
			if local != nil {
				// This rank's fabric error is not why the team stops.
				return nil, nil, errors.Join(pe, local)
			}
			return nil, nil, pe
		}
	}
	if len(fallback) > 0 {
		var w fabricWire
		if err := json.Unmarshal(all[fallback[0]][1:], &w); err != nil {
			return nil, nil, fmt.Errorf("team: rank %d: %s: fabric error of rank %d: %w", boot.Rank(), step, fallback[0], err)
		}
		fe := w.fabricError()
		fe.failed = fallback
		return nil, fe, nil
	}
	out := make([][]byte, len(all))
	for r, m := range all {
		out[r] = m[1:]
	}
	return out, nil, nil
}

// mcAgree is agree for a multicast step, where the team may fall back.
func (b *bringup) mcAgree(step string, local error) (*FabricError, error) {
	_, fe, err := exchangeFB(b.ctx, b.r.boot, step, local, nil, b.auto)
	return fe, err
}

// fallBack undoes this rank's multicast state once the ranks agreed to go
// on with unicast: attached and imported objects are closed first, then,
// after every rank did, the creator's (which releases the handle). Each
// half ends with an exchange, so that a rank that cannot undo its part
// stops every rank (and the team's teardown frees the rest).
func (b *bringup) fallBack(fe *FabricError) error {
	r := b.r
	drop := func(creator bool) error {
		if r.mc == nil || (r.mc.Origin() == multicast.Created) != creator {
			return nil
		}
		err := r.mc.Close()
		// The object keeps in its books whatever it could not undo; a
		// later Close (the teardown's) retries it.
		r.mcBase, r.mcBound = 0, false
		if err != nil {
			return b.fail(stepMCUnwind, err)
		}
		r.mc = nil
		return nil
	}
	if err := b.agree(stepMCUnwind, drop(false)); err != nil {
		return err
	}
	if err := b.agree(stepMCUnwind, drop(true)); err != nil {
		return err
	}
	b.sh.transport = Unicast
	b.sh.reason = fmt.Sprintf("auto: multicast failed at %s on rank %d (%s); fell back to unicast", fe.Step, fe.Rank, fe.DriverCall())
	b.sh.fallback = fe
	if r.own == nil {
		// No memory yet: size the workspace as a unicast team would.
		b.sh.gran = b.dec.gran
		b.sh.wsBytes = multicast.RoundUp(kernels.SignalBytes+b.cfg.dataBytes, b.sh.gran)
	}
	if b.logFallback {
		r.log.Warn("team: multicast failed; falling back to unicast on every rank",
			"step", fe.Step, "rank", fe.Rank, "device", int(fe.Device), "cause", fe.DriverCall(),
			"failed_ranks", fmt.Sprint(fe.failed), "likely", fe.Likely, "remedy", fe.Remedy)
	}
	return nil
}
