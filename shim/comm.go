//go:build cgo

package main

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"time"

	"github.com/nvls-go/nvls/collectives"
	"github.com/nvls-go/nvls/cuda"
	"github.com/nvls-go/nvls/internal/teamlink"
	"github.com/nvls-go/nvls/nccl"
	"github.com/nvls-go/nvls/team"
	"github.com/nvls-go/nvls/team/sock"
)

// config is what the shim takes from an ncclConfig_t.
type config struct {
	blocking bool
}

// getUniqueID starts a rendezvous in this process (team/sock) and returns
// its id.
func getUniqueID() (sock.ID, error) {
	_, cancel, d, err := setupContext()
	if err != nil {
		return sock.ID{}, err
	}
	cancel()
	id, err := sock.NewID(d, shim.log)
	if err != nil {
		return id, fail(nccl.SystemError, "libnccl-nvls: ncclGetUniqueId: %w", err)
	}
	return id, nil
}

// initRank makes this thread's rank of the job id names, on the current
// device. With a non-blocking config it returns the comm at once, its
// bring-up going on (ncclCommGetAsyncError says ncclInProgress until it
// ends).
func initRank(nranks int, id sock.ID, rank int, cfg config) (*rankComm, error) {
	if nranks < 1 || rank < 0 || rank >= nranks {
		return nil, fail(nccl.InvalidArgument, "libnccl-nvls: ncclCommInitRank: rank %d of %d ranks is out of range", rank, nranks)
	}
	if err := id.Check(); err != nil {
		return nil, fail(nccl.InvalidArgument, "libnccl-nvls: ncclCommInitRank: %w", err)
	}
	d, err := driver()
	if err != nil {
		return nil, err
	}
	dev, err := currentDevice(d)
	if err != nil {
		return nil, err
	}
	c := &rankComm{handle: allocHandle(), rank: rank, nranks: nranks, dev: dev, blocking: cfg.blocking,
		ready: make(chan struct{})}
	register(c)
	// The real NCCL is told about the device on this thread: it reads the
	// runtime's current device, so its init runs here, after ours.
	bringUp := func() {
		defer close(c.ready)
		j, err := newRankJob(d, dev, nranks, id, rank)
		if err != nil {
			c.initErr = err
			return
		}
		j.ranks = []*rankComm{c}
		c.j = j
		addJob(j)
		c.real = realInitRank(j)
		shim.log.Info("libnccl-nvls: ncclCommInitRank: ready", "rank", rank, "nranks", nranks, "device", int(dev),
			"transport", j.t.Transport().String(), "forward_to", realDescr(c.real != nil))
	}
	// Inside a group NCCL starts the ranks' inits at ncclGroupEnd, so one
	// thread can init several ranks (nccl-tests -g N): the bring-up goes
	// on in the background and the outermost ncclGroupEnd waits for it.
	g := myGroup()
	if !cfg.blocking || g != nil {
		if g != nil && cfg.blocking {
			g.inits = append(g.inits, c)
		}
		go bringUp()
		return c, nil
	}
	bringUp()
	if c.initErr != nil {
		unregister(c)
		return nil, c.initErr
	}
	return c, nil
}

func newRankJob(d cuda.Driver, dev cuda.Device, nranks int, id sock.ID, rank int) (*job, error) {
	ctx, cancel, _, err := setupContext()
	if err != nil {
		return nil, err
	}
	defer cancel()
	boot, err := sock.Join(ctx, id, nranks, rank)
	if err != nil {
		return nil, fmt.Errorf("libnccl-nvls: ncclCommInitRank: rank %d: %w", rank, err)
	}
	opts, err := teamOptions()
	if err != nil {
		_ = boot.Close()
		return nil, err
	}
	t, err := team.NewRank(ctx, d, dev, boot, opts...)
	if err != nil {
		_ = boot.Close()
		return nil, fmt.Errorf("libnccl-nvls: ncclCommInitRank: rank %d: %w", rank, err)
	}
	c, err := collectives.NewContext(ctx, t)
	if err != nil {
		_ = t.Close()
		_ = boot.Close()
		return nil, fmt.Errorf("libnccl-nvls: ncclCommInitRank: rank %d: %w", rank, err)
	}
	return newJob(t, c, boot), nil
}

func newJob(t *team.Team, c *collectives.Comm, boot *sock.Bootstrap) *job {
	return &job{t: t, c: c, boot: boot, rounds: map[uint64]*round{},
		parts: make([]uint64, t.NumLocal()), live: t.NumLocal()}
}

// initAll makes a job over devs driven by this process, a comm per device.
func initAll(devs []int) ([]*rankComm, error) {
	d, err := driver()
	if err != nil {
		return nil, err
	}
	n, err := d.DeviceCount()
	if err != nil {
		return nil, &callError{code: nccl.UnhandledCudaError, err: err}
	}
	cdevs := make([]cuda.Device, len(devs))
	for i, v := range devs {
		if v < 0 || v >= n || slices.Contains(devs[:i], v) {
			return nil, fail(nccl.InvalidArgument, "libnccl-nvls: ncclCommInitAll: device %d (the list %v: each of 0 to %d, once)", v, devs, n-1)
		}
		cdevs[i] = cuda.Device(v)
	}
	ctx, cancel, _, err := setupContext()
	if err != nil {
		return nil, err
	}
	defer cancel()
	opts, err := teamOptions()
	if err != nil {
		return nil, err
	}
	t, err := team.New(ctx, d, cdevs, opts...)
	if err != nil {
		return nil, fmt.Errorf("libnccl-nvls: ncclCommInitAll: %w", err)
	}
	c, err := collectives.NewContext(ctx, t)
	if err != nil {
		_ = t.Close()
		return nil, fmt.Errorf("libnccl-nvls: ncclCommInitAll: %w", err)
	}
	j := newJob(t, c, nil)
	reals := realInitAll(devs)
	for l, dev := range cdevs {
		rc := &rankComm{handle: allocHandle(), j: j, local: l, rank: t.Rank(l), nranks: len(devs), dev: dev,
			blocking: true, ready: make(chan struct{}), real: reals[l]}
		close(rc.ready)
		j.ranks = append(j.ranks, rc)
		register(rc)
	}
	addJob(j)
	shim.log.Info("libnccl-nvls: ncclCommInitAll: ready", "devices", devs, "transport", t.Transport().String(),
		"forward_to", realDescr(reals[0] != nil))
	return j.ranks, nil
}

func register(c *rankComm) {
	shim.mu.Lock()
	defer shim.mu.Unlock()
	shim.comms[c.handle] = c
}

func unregister(c *rankComm) {
	shim.mu.Lock()
	delete(shim.comms, c.handle)
	shim.mu.Unlock()
	freeHandle(c.handle)
}

func addJob(j *job) {
	shim.mu.Lock()
	defer shim.mu.Unlock()
	shim.jobs = append(shim.jobs, j)
}

// ready waits for a non-blocking comm's bring-up, up to the setup
// deadline, and returns its error.
func (c *rankComm) waitReady() error {
	select {
	case <-c.ready:
	default:
		ctx, cancel, _, err := setupContext()
		if err != nil {
			return err
		}
		defer cancel()
		select {
		case <-c.ready:
		case <-ctx.Done():
			return fail(nccl.InvalidUsage, "libnccl-nvls: rank %d: the communicator's initialization has not finished by the setup deadline", c.rank)
		}
	}
	if c.initErr != nil {
		return c.initErr
	}
	if c.aborted {
		return fail(nccl.InvalidUsage, "libnccl-nvls: rank %d: the communicator was aborted", c.rank)
	}
	return nil
}

// asyncError is ncclCommGetAsyncError's answer.
func (c *rankComm) asyncError() (nccl.Result, error) {
	select {
	case <-c.ready:
	default:
		return nccl.InProgress, nil
	}
	if c.initErr != nil {
		return codeOf(c.initErr), c.initErr
	}
	c.mu.Lock()
	err := c.asyncErr
	c.mu.Unlock()
	if err == nil && c.j != nil {
		err = c.j.c.Err()
	}
	if err != nil {
		return codeOf(err), err
	}
	return nccl.Success, nil
}

// finalize waits for the work this rank issued, up to the kernels'
// deadline, and reports its failure.
func (c *rankComm) finalize() error {
	if err := c.waitReady(); err != nil {
		return err
	}
	err := c.sync()
	c.mu.Lock()
	c.finalized = true
	c.mu.Unlock()
	if c.real != nil {
		realFinalize(c.real)
	}
	return err
}

// sync waits for every stream this rank used (Comm.Sync, all local ranks
// at once: the default stream for the others).
func (c *rankComm) sync() error {
	c.mu.Lock()
	ss := make([]cuda.Stream, 0, len(c.streams))
	for s := range c.streams {
		ss = append(ss, s)
	}
	c.mu.Unlock()
	if len(ss) == 0 || c.j == nil {
		return nil
	}
	for _, s := range ss {
		streams := make([]cuda.Stream, c.j.t.NumLocal())
		for l := range streams {
			streams[l] = c.j.ranks[l].lastStream(s, l == c.local)
		}
		if err := c.j.c.Sync(context.Background(), streams); err != nil {
			c.setAsync(err)
			return err
		}
	}
	c.mu.Lock()
	clear(c.streams)
	c.mu.Unlock()
	return nil
}

// lastStream is s for this rank, else a stream the rank used (or its
// default stream).
func (c *rankComm) lastStream(s cuda.Stream, mine bool) cuda.Stream {
	if mine {
		return s
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	for st := range c.streams {
		return st
	}
	return 0
}

func (c *rankComm) setAsync(err error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.asyncErr == nil {
		c.asyncErr = err
	}
}

// destroy frees the rank; the job's team goes with its last rank.
func (c *rankComm) destroy(abort bool) error {
	// No wait on the streams this rank used: the caller may have
	// destroyed them (ncclCommFinalize waits; Comm.Close waits for the
	// kernels it launched).
	var err error
	if !abort {
		if werr := c.waitReady(); werr != nil && c.j == nil && c.real == nil {
			err = werr
		}
	}
	c.mu.Lock()
	c.aborted = c.aborted || abort
	ran, fwd, why := c.ran, c.fwd, fmtWhy(c.fwdWhy)
	c.mu.Unlock()
	shim.log.Info("libnccl-nvls: "+map[bool]string{false: "ncclCommDestroy", true: "ncclCommAbort"}[abort],
		"rank", c.rank, "ran_here", ran, "forwarded", fwd, "forwarded_why", why)
	if c.real != nil {
		realDestroy(c.real, abort)
	}
	unregister(c)
	if c.j != nil {
		err = errors.Join(err, c.j.leave(abort))
	}
	return err
}

// leave drops one rank; the last one closes the job, bounded when
// aborting (the close goes on in the background past the bound).
func (j *job) leave(abort bool) error {
	j.mu.Lock()
	j.live--
	last := j.live == 0
	j.mu.Unlock()
	if abort {
		teamlink.Of(j.t).Fail(errors.New("libnccl-nvls: ncclCommAbort"))
		if j.boot != nil {
			_ = j.boot.Close()
		}
	}
	if !last {
		return nil
	}
	// ncclMemAlloc's memory outlives the communicator (as NCCL's does):
	// while some of the team's is out, only the Comm closes now, and the
	// last ncclMemFree closes the team (memFree).
	shim.mu.Lock()
	shim.jobs = slices.DeleteFunc(shim.jobs, func(x *job) bool { return x == j })
	out := false
	for _, b := range shim.mem {
		out = out || b.j == j
	}
	j.closing = out
	shim.mu.Unlock()
	done := make(chan error, 1)
	go func() {
		err := j.c.Close()
		if !out {
			err = errors.Join(err, j.closeTeam())
		}
		done <- err
	}()
	if !abort {
		return <-done
	}
	select {
	case err := <-done:
		return err
	case <-time.After(abortBound):
		shim.log.Warn("libnccl-nvls: ncclCommAbort: the team's teardown goes on in the background", "after", abortBound)
		return nil
	}
}

// closeTeam closes the job's team and bootstrap.
func (j *job) closeTeam() error {
	err := j.t.Close()
	if j.boot != nil {
		err = errors.Join(err, j.boot.Close())
	}
	return err
}

// abortBound is how long ncclCommAbort waits for the teardown.
const abortBound = 2 * time.Second

func fmtWhy(m map[string]int) string {
	keys := make([]string, 0, len(m))
	for k := range m {
		keys = append(keys, k)
	}
	slices.Sort(keys)
	s := ""
	for _, k := range keys {
		if s != "" {
			s += "; "
		}
		s += fmt.Sprintf("%s: %d", k, m[k])
	}
	return s
}
