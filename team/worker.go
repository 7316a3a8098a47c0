package team

import (
	"errors"
	"fmt"
	"runtime"
	"runtime/debug"

	"github.com/nvls-go/nvls/cuda"
)

// Job is work to run on every local rank's worker (see Team.Run). Run is
// called with the local rank's index (0 <= localRank < Team.NumLocal()) on
// that rank's worker: an OS thread with the rank's device context current.
// Pass a pointer to a preallocated job so that the dispatch allocates
// nothing.
type Job interface {
	Run(localRank int) error
}

// JobFunc adapts a function to Job.
type JobFunc func(localRank int) error

// Run calls f(localRank).
func (f JobFunc) Run(localRank int) error { return f(localRank) }

// worker is one goroutine locked to its OS thread with the primary context
// of its device current; every driver call for the device runs there.
type worker struct {
	d      cuda.Driver
	dev    cuda.Device
	local  int
	cctx   cuda.Context
	jobs   chan Job
	done   chan error
	quit   chan struct{}
	exited chan struct{}
	// stopErr is what releasing the context returned (read after exited).
	stopErr error
}

// startWorker starts the worker of device dev and returns once its thread
// holds the device's primary context, current.
func startWorker(d cuda.Driver, dev cuda.Device, local int) (*worker, error) {
	w := &worker{
		d: d, dev: dev, local: local,
		jobs:   make(chan Job, 1),
		done:   make(chan error, 1),
		quit:   make(chan struct{}),
		exited: make(chan struct{}),
	}
	started := make(chan error, 1)
	go w.loop(started)
	if err := <-started; err != nil {
		<-w.exited
		return nil, err
	}
	return w, nil
}

func (w *worker) loop(started chan<- error) {
	defer close(w.exited)
	runtime.LockOSThread()
	c, err := w.d.PrimaryCtxRetain(w.dev)
	if err != nil {
		// The goroutine ends locked: its thread goes with it.
		started <- fmt.Errorf("retain primary context: %w", err)
		return
	}
	if err := w.d.CtxSetCurrent(c); err != nil {
		err = fmt.Errorf("make primary context current: %w", err)
		if rerr := w.d.PrimaryCtxRelease(w.dev); rerr != nil {
			err = errors.Join(err, fmt.Errorf("release primary context: %w", rerr))
		}
		started <- err
		return
	}
	w.cctx = c
	started <- nil
	for {
		select {
		case j := <-w.jobs:
			w.done <- w.exec(j)
		case <-w.quit:
			w.stopErr = w.release()
			return
		}
	}
}

// release makes no context current on the thread and releases the primary
// context. When the thread is clean it goes back to the runtime; otherwise
// it ends with the goroutine.
func (w *worker) release() error {
	var errs []error
	clean := true
	if err := w.d.CtxSetCurrent(0); err != nil {
		errs = append(errs, fmt.Errorf("clear current context: %w", err))
		clean = false
	}
	if err := w.d.PrimaryCtxRelease(w.dev); err != nil {
		errs = append(errs, fmt.Errorf("release primary context: %w", err))
		// Once more, so that one failed call does not keep the context.
		if rerr := w.d.PrimaryCtxRelease(w.dev); rerr != nil {
			errs = append(errs, fmt.Errorf("release primary context (retry): %w", rerr))
		}
	}
	if clean {
		runtime.UnlockOSThread()
	}
	return errors.Join(errs...)
}

func (w *worker) exec(j Job) (err error) {
	defer func() {
		if p := recover(); p != nil {
			err = fmt.Errorf("team: local rank %d (device %d): job panicked: %v\n%s", w.local, w.dev, p, debug.Stack())
		}
	}()
	return j.Run(w.local)
}

// do runs f on the worker and waits for it.
func (w *worker) do(f func() error) error {
	w.jobs <- JobFunc(func(int) error { return f() })
	return <-w.done
}

// stop ends the worker, releasing its context, and returns what that
// returned. It must be called once, with no job in flight.
func (w *worker) stop() error {
	close(w.quit)
	<-w.exited
	return w.stopErr
}
