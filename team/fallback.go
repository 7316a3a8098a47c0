package team

import (
	"errors"
	"fmt"

	"github.com/nvls-go/nvls/cuda"
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
	// Retries is how many times every rank retried the step before this
	// error stood (WithFabricRetry; transient errors only).
	Retries int

	// failed: every rank where multicast failed at that step (known
	// after the exchange).
	failed []int
	// retry: the exchange's verdict was to retry the step.
	retry bool
}

func (e *FabricError) Error() string {
	what := "multicast fabric not ready"
	if e.Code == cuda.ErrorInvalidDevice {
		what = "multicast cannot span these devices"
	}
	retried := ""
	if e.Retries > 0 {
		retried = fmt.Sprintf(" (after %d retries of the step by every rank)", e.Retries)
	}
	return fmt.Sprintf("team: rank %d (device %d): %s: %s: %v%s. Likely: %s. What to do: %s",
		e.Rank, e.Device, e.Step, what, e.Cause, retried, e.Likely, e.Remedy)
}

// transient: the fabric may be ready when asked again (a Fabric Manager
// that stalls answers CUDA_ERROR_SYSTEM_NOT_READY for a while).
func (e *FabricError) transient() bool { return e.Code == cuda.ErrorSystemNotReady }

// Unwrap returns ErrFabricNotReady and the cause.
func (e *FabricError) Unwrap() []error { return []error{ErrFabricNotReady, e.Cause} }

// DriverCall is the failed call and its result, e.g.
// "cuMulticastBindMem: CUDA_ERROR_SYSTEM_NOT_READY (802)".
func (e *FabricError) DriverCall() string {
	return fmt.Sprintf("%s: %s (%d)", e.Op, e.Code, int32(e.Code))
}

// fabricWire is a FabricError as it travels between ranks.
type fabricWire struct {
	Step    string
	Rank    int
	Device  int32
	Op      string
	Code    int32
	Detail  string
	Cause   string
	Likely  string
	Remedy  string
	Retries int
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
		Cause: e.Cause.Error(), Likely: e.Likely, Remedy: e.Remedy, Retries: e.Retries}
	var ce *cuda.Error
	if errors.As(e.Cause, &ce) {
		w.Detail = ce.Detail
	}
	return w
}

func (w fabricWire) fabricError() *FabricError {
	drv := cuda.NewError(w.Op, cuda.Result(w.Code), w.Detail)
	return &FabricError{Step: w.Step, Rank: w.Rank, Device: cuda.Device(w.Device), Op: w.Op, Code: cuda.Result(w.Code),
		Cause: &wireCause{msg: w.Cause, drv: drv}, Likely: w.Likely, Remedy: w.Remedy, Retries: w.Retries}
}

// stepError names the running step, the rank and the device in err; in a
// multicast step, an error that says the fabric cannot serve multicast
// becomes a *FabricError (after retries of the step, as many).
func (b *bringup) stepError(err error, retries int) error {
	if !b.step.multicast {
		return b.fail(b.step.name, err)
	}
	d, ok := multicast.Diagnose(err, b.agreed.handles)
	if !ok {
		return b.fail(b.step.name, err)
	}
	return &FabricError{Step: b.step.name, Rank: b.r.rank, Device: b.r.dev, Op: d.Op, Code: d.Code, Cause: err,
		Likely: d.Likely, Remedy: d.Check + "; " + remedy, Retries: retries}
}

// fallBack undoes this rank's multicast state once the ranks agreed to go
// on with unicast: the ranks that attached to or imported the multicast
// object first, then, after every one did, its creator (which releases
// the handle). Each half ends with an exchange, so that a rank that
// cannot undo its part stops every rank (and the teardown frees the rest).
func (b *bringup) fallBack(cause *FabricError) error {
	r := b.r
	creator := r.mc != nil && r.mc.Origin() == multicast.Created
	if err := b.agree(stepMCUnwind, b.undoMulticast(!creator)); err != nil {
		return err
	}
	if err := b.agree(stepMCUnwind, b.undoMulticast(creator)); err != nil {
		return err
	}
	b.agreed.transport = Unicast
	b.agreed.reason = fmt.Sprintf("auto: multicast failed at %s on rank %d (%s); fell back to unicast", cause.Step, cause.Rank, cause.DriverCall())
	b.agreed.fallback = cause
	if r.own == nil {
		// No memory yet: size the workspace as a unicast team would.
		b.agreed.layout.Gran = b.dec.gran
	}
	if b.logFallback {
		args := []any{"step", cause.Step, "rank", cause.Rank, "device", int(cause.Device), "cause", cause.DriverCall(),
			"failed_ranks", fmt.Sprint(cause.failed), "likely", cause.Likely, "remedy", cause.Remedy}
		if cause.Retries > 0 {
			args = append(args, "retries", cause.Retries)
		}
		r.log.Warn("team: multicast failed; falling back to unicast on every rank", args...)
	}
	return nil
}

// undoMulticast (when now) runs this rank's multicast undos, last first,
// on the calling worker: unmap, unbind, release the object.
func (b *bringup) undoMulticast(now bool) error {
	if !now {
		return nil
	}
	if err := b.r.undoWhere(func(u undo) bool { return u.multicast }); err != nil {
		return b.fail(stepMCUnwind, err)
	}
	return nil
}
