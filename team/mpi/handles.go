//go:build mpi

package mpi

import (
	"context"
	"errors"
	"fmt"

	"github.com/nvls-go/nvls/cuda"
	"github.com/nvls-go/nvls/team/mpi/handletype"
)

// WithHandleType fixes the shareable handle type HandleType returns
// instead of detecting it: cuda.HandlePosixFD (no fabric check at all) or
// cuda.HandleFabric (an error unless every rank can use fabric handles).
// cuda.HandleNone, the default, detects.
func WithHandleType(t cuda.HandleType) Option { return func(o *options) { o.handleType = t } }

// WithFabricProbe says where HandleType looks for the IMEX channel (for
// tests; the zero value looks in the usual places).
func WithFabricProbe(p handletype.Probe) Option { return func(o *options) { o.probe = p } }

// HandleType decides, with every rank, how the ranks share driver
// handles: cuda.HandleFabric when every rank's device supports fabric
// handles, has a usable IMEX channel and passes a trial export (fabric
// handles then travel through AllGather), else cuda.HandlePosixFD (through
// AllGatherFDs), which needs all ranks on one host. It is collective;
// every rank gets the same answer and the reason, which it also logs at
// INFO. dev is this rank's device; the trial export makes dev's primary
// context current on a thread of its own for a moment.
func (b *Bootstrap) HandleType(ctx context.Context, d cuda.Driver, dev cuda.Device) (cuda.HandleType, string, error) {
	var s handletype.Support
	switch b.o.handleType {
	case cuda.HandleNone, cuda.HandleFabric:
		s = handletype.Check(d, dev, b.o.probe)
	case cuda.HandlePosixFD:
		s = handletype.Support{Reason: "POSIX file descriptors asked for (WithHandleType)"}
	default:
		return cuda.HandleNone, "", fmt.Errorf("mpi: WithHandleType(%v): want posix-fd or fabric", b.o.handleType)
	}
	enc, err := s.MarshalBinary()
	if err != nil {
		return cuda.HandleNone, "", err
	}
	all, err := b.AllGather(ctx, enc)
	if err != nil {
		return cuda.HandleNone, "", fmt.Errorf("mpi: rank %d: handle type: %w", b.rank, err)
	}
	sups := make([]handletype.Support, len(all))
	for r, m := range all {
		if err := sups[r].UnmarshalBinary(m); err != nil {
			return cuda.HandleNone, "", fmt.Errorf("mpi: rank %d: handle type: from rank %d: %w", b.rank, r, err)
		}
	}
	t, why, err := handletype.Decide(sups, b.hosts)
	if err == nil && b.o.handleType == cuda.HandleFabric && t != cuda.HandleFabric {
		err = fmt.Errorf("mpi: fabric handles asked for (WithHandleType), but %s", why)
	}
	if err != nil {
		return cuda.HandleNone, why, fmt.Errorf("mpi: rank %d: handle type: %w", b.rank, err)
	}
	b.log.Info("mpi: shareable handles: "+t.String(), "rank", b.rank, "why", why)
	return t, why, nil
}

// ErrNoDevice: the local rank has no device of its own.
var ErrNoDevice = errors.New("mpi: no device for this local rank")

// Device maps a local rank to a device: local rank i drives the i-th
// device the driver shows (after CUDA_VISIBLE_DEVICES). More local ranks
// than devices is an error matching ErrNoDevice: two ranks on one GPU
// cannot form a team.
func Device(d cuda.Driver, localRank int) (cuda.Device, error) {
	n, err := d.DeviceCount()
	if err != nil {
		return 0, fmt.Errorf("mpi: device count: %w", err)
	}
	if localRank < 0 || localRank >= n {
		return 0, fmt.Errorf("%w: local rank %d, but %d device(s) visible", ErrNoDevice, localRank, n)
	}
	dev, err := d.DeviceGet(localRank)
	if err != nil {
		return 0, fmt.Errorf("mpi: device of local rank %d: %w", localRank, err)
	}
	return dev, nil
}
