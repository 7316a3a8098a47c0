// Package teamlink is what package collectives uses of a team beyond its
// public API: the workspace's aliases, running jobs on the calling
// goroutine, the allocator's bookkeeping, marking the team failed. Package
// team implements it and registers the implementation (Register); users
// of the module cannot import it, so team's public API is what a user
// needs and no more.
package teamlink

import (
	"github.com/nvls-go/nvls/cuda"
	"github.com/nvls-go/nvls/internal/kabi"
)

// Job is a team's per-rank job (team.Job has the same method).
type Job interface {
	Run(localRank int) error
}

// Team is a *team.Team as package collectives sees it.
type Team interface {
	// UCBases are local rank localRank's addresses of every rank's
	// workspace (its own through its UC alias, the others' through the
	// peer mappings); MCBase its multicast alias' (0 with unicast).
	UCBases(localRank int) [kabi.MaxRanks]cuda.DevicePtr
	MCBase(localRank int) cuda.DevicePtr
	// Layout is every rank's workspace: where the signal and data areas
	// are, and its size.
	Layout() kabi.Layout
	// MaxRanksOnDevice is the most ranks that share one device.
	MaxRanksOnDevice() int
	// OneContext reports whether every local rank runs in one context.
	OneContext() bool
	// RunHere runs a job for every local rank on the calling goroutine,
	// in turn, with that rank's context current (made current only where
	// it is not: once with one context, once a rank with several).
	RunHere(job Job) error
	// BufferAt is the live buffer of Alloc that holds all n bytes at data
	// offset off: its offset and size.
	BufferAt(off, n uint64) (bufOff, bufSize uint64, ok bool)
	// Fail marks the team failed with err (the first failure wins).
	Fail(err error)
}

var of func(any) Team

// Register sets how a *team.Team becomes a Team; package team calls it
// from its init.
func Register(f func(any) Team) { of = f }

// Of is t, a *team.Team, as a Team.
func Of(t any) Team { return of(t) }
