package peercheck

import (
	"bytes"
	"context"
	"crypto/sha256"
	"fmt"
	mrand "math/rand/v2"

	"github.com/nvls-go/nvls/cuda"
	"github.com/nvls-go/nvls/team"
)

// StampBytes is the size of one rank's stamp in a peer's stamp buffer.
const StampBytes = 16

// Pattern is rank r's size-byte pattern for seed.
func Pattern(seed [32]byte, r int, size uint64) []byte {
	h := sha256.Sum256(append(seed[:], fmt.Sprintf("pattern/%d", r)...))
	out := make([]byte, size)
	mrand.NewChaCha8(h).Read(out)
	return out
}

// Stamp is what rank from writes into rank to's stamp buffer.
func Stamp(seed [32]byte, from, to int) []byte {
	h := sha256.Sum256(append(seed[:], fmt.Sprintf("stamp/%d/%d", from, to)...))
	return h[:StampBytes]
}

// Seed all-gathers rank 0's seed (fresh random bytes it passes) so that
// every rank holds the same one.
func Seed(ctx context.Context, boot team.Bootstrap, fresh [32]byte) ([32]byte, error) {
	var mine []byte
	if boot.Rank() == 0 {
		mine = fresh[:]
	}
	all, err := boot.AllGather(ctx, mine)
	if err != nil {
		return [32]byte{}, fmt.Errorf("peercheck: seed: %w", err)
	}
	if len(all[0]) != 32 {
		return [32]byte{}, fmt.Errorf("peercheck: seed of %d bytes from rank 0", len(all[0]))
	}
	return [32]byte(all[0]), nil
}

// Run checks tm (one local rank, brought up over boot) with size-byte
// patterns. Every rank calls it; it returns nil when this rank read every
// peer's pattern and found every peer's stamp.
func Run(ctx context.Context, tm *team.Team, boot team.Bootstrap, seed [32]byte, size uint64) error {
	if tm.NumLocal() != 1 {
		return fmt.Errorf("peercheck: team has %d local ranks, want 1", tm.NumLocal())
	}
	n := tm.Size()
	me := tm.Rank(0)
	d := tm.Driver()
	buf, err := tm.Alloc(size)
	if err != nil {
		return err
	}
	defer tm.Free(buf)
	stamps, err := tm.Alloc(uint64(n) * StampBytes)
	if err != nil {
		return err
	}
	defer tm.Free(stamps)

	// Writes: own pattern into own buffer; a stamp into every peer's
	// stamp buffer, at this rank's slot, through the peer mapping.
	werr := tm.Run(team.JobFunc(func(l int) error {
		if err := cuda.CopyHtoD(d, buf.Ptr(l), Pattern(seed, me, size)); err != nil {
			return fmt.Errorf("rank %d: write own pattern: %w", me, err)
		}
		for q := range n {
			p := stamps.PeerPtr(l, q) + cuda.DevicePtr(me*StampBytes)
			if err := cuda.CopyHtoD(d, p, Stamp(seed, me, q)); err != nil {
				return fmt.Errorf("rank %d: write stamp into rank %d's buffer: %w", me, q, err)
			}
		}
		return d.CtxSynchronize()
	}))
	// Every rank wrote (or failed) before anyone reads.
	if err := agree(ctx, boot, "written", werr); err != nil {
		return err
	}

	rerr := tm.Run(team.JobFunc(func(l int) error {
		scratch, err := d.MemAlloc(size)
		if err != nil {
			return fmt.Errorf("rank %d: scratch: %w", me, err)
		}
		defer d.MemFree(scratch)
		host := make([]byte, size)
		for q := range n {
			clear(host)
			if err := d.MemcpyDtoD(scratch, buf.PeerPtr(l, q), size); err != nil {
				return fmt.Errorf("rank %d: read rank %d's buffer: %w", me, q, err)
			}
			if err := cuda.CopyDtoH(d, host, scratch); err != nil {
				return fmt.Errorf("rank %d: scratch to host: %w", me, err)
			}
			if want := Pattern(seed, q, size); !bytes.Equal(host, want) {
				return fmt.Errorf("rank %d (device %d) reads a wrong copy of rank %d's buffer (first difference at byte %d)", me, tm.Device(l), q, firstDiff(host, want))
			}
		}
		got := make([]byte, n*StampBytes)
		if err := cuda.CopyDtoH(d, got, stamps.Ptr(l)); err != nil {
			return fmt.Errorf("rank %d: read own stamps: %w", me, err)
		}
		for q := range n {
			if !bytes.Equal(got[q*StampBytes:(q+1)*StampBytes], Stamp(seed, q, me)) {
				return fmt.Errorf("rank %d: rank %d's stamp is missing or wrong in its buffer", me, q)
			}
		}
		return nil
	}))
	// Nobody frees (or closes) while a peer may still read.
	return agree(ctx, boot, "read", rerr)
}

// agree all-gathers every rank's outcome: this rank's error, or the first
// failed peer's.
func agree(ctx context.Context, boot team.Bootstrap, step string, local error) error {
	msg := []byte{0}
	if local != nil {
		msg = append([]byte{1}, local.Error()...)
	}
	all, err := boot.AllGather(ctx, msg)
	if err != nil {
		return fmt.Errorf("peercheck: %s: %w", step, err)
	}
	if local != nil {
		return local
	}
	for r, m := range all {
		if len(m) == 0 || m[0] != 0 {
			return fmt.Errorf("peercheck: %s: rank %d failed: %s", step, r, m[min(1, len(m)):])
		}
	}
	return nil
}

func firstDiff(a, b []byte) int {
	for i := range min(len(a), len(b)) {
		if a[i] != b[i] {
			return i
		}
	}
	return min(len(a), len(b))
}
