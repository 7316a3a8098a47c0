package team

import (
	"errors"
	"fmt"
	"runtime"
	"runtime/debug"
	"sync"
	"sync/atomic"
	"time"

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
//
// Handing a job to a parked goroutine that is locked to its thread costs a
// futex wake of that thread (about 30 us measured on a 2-core VM), which
// would dominate a small collective's launch. So a job travels through two
// counters: the dispatcher stores the job and bumps req; the worker, which
// spins on req for a while after each job (spin, see workerSpin) before it
// parks, runs it, stores the result and bumps fin; the dispatcher spins on
// fin likewise. Only a side that found the other parked pays for a wake
// (wake, done: one-slot channels; a stale token only causes a re-check).
type worker struct {
	d       cuda.Driver
	dev     cuda.Device
	local   int
	primary cuda.Context
	spin    time.Duration
	quit    chan struct{}
	exited  chan struct{}
	// stopErr is what releasing the context returned (read after exited).
	stopErr error

	mu  sync.Mutex // one job at a time (Run and do)
	job Job        // written by the dispatcher before req is bumped
	err error      // written by the worker before fin is bumped

	req, fin          atomic.Uint64
	sleeping, waiting atomic.Bool
	wake, done        chan struct{}
}

// workerSpin is how long a worker (and a dispatcher waiting for one) spins
// before parking, for a team of n local ranks: DefaultWorkerSpin where the
// process has a processor for every worker and one for the dispatcher, none
// otherwise (spinning threads that share processors only slow each other).
func workerSpin(n int, spin time.Duration) time.Duration {
	if runtime.GOMAXPROCS(0) <= n {
		return 0
	}
	return spin
}

// startWorker starts the worker of device dev and returns once its thread
// holds the device's primary context, current.
func startWorker(d cuda.Driver, dev cuda.Device, local int, spin time.Duration) (*worker, error) {
	w := &worker{
		d: d, dev: dev, local: local, spin: spin,
		quit:   make(chan struct{}),
		exited: make(chan struct{}),
		wake:   make(chan struct{}, 1),
		done:   make(chan struct{}, 1),
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
	w.primary = c
	started <- nil
	var seen uint64
	for {
		n, ok := w.next(seen)
		if !ok {
			w.stopErr = w.release()
			return
		}
		seen = n
		w.err = w.exec(w.job)
		w.fin.Store(n)
		if w.waiting.Load() {
			select {
			case w.done <- struct{}{}:
			default:
			}
		}
	}
}

// next waits for the job after seen: spinning first, then parked. It
// returns false when the worker is told to quit.
func (w *worker) next(seen uint64) (uint64, bool) {
	if n, ok := spinUntil(&w.req, seen, w.spin, w.quit); ok {
		return n, true
	}
	for {
		w.sleeping.Store(true)
		if n := w.req.Load(); n != seen {
			w.sleeping.Store(false)
			return n, true
		}
		select {
		case <-w.wake:
		case <-w.quit:
			w.sleeping.Store(false)
			return 0, false
		}
		w.sleeping.Store(false)
		if n := w.req.Load(); n != seen {
			return n, true
		}
	}
}

// spinUntil spins for at most d until c differs from old; it returns the
// new value and true, or false when d passed (or quit was closed) first.
func spinUntil(c *atomic.Uint64, old uint64, d time.Duration, quit <-chan struct{}) (uint64, bool) {
	if d <= 0 {
		return 0, false
	}
	var start time.Time
	for i := 0; ; i++ {
		if n := c.Load(); n != old {
			return n, true
		}
		if i&63 == 63 {
			if start.IsZero() {
				start = time.Now()
			} else if time.Since(start) > d {
				return 0, false
			}
			select {
			case <-quit:
				return 0, false
			default:
			}
		}
	}
}

// submit hands j to the worker; the caller holds w.mu and must await the
// returned ticket before the next submit.
func (w *worker) submit(j Job) uint64 {
	w.job = j
	n := w.req.Add(1)
	if w.sleeping.Load() {
		select {
		case w.wake <- struct{}{}:
		default:
		}
	}
	return n
}

// await waits until the job with ticket n has run and returns its error.
func (w *worker) await(n uint64) error {
	if w.fin.Load() != n {
		if _, ok := spinUntil(&w.fin, n-1, w.spin, nil); !ok {
			for w.fin.Load() != n {
				w.waiting.Store(true)
				if w.fin.Load() != n {
					<-w.done
				}
				w.waiting.Store(false)
			}
		}
	}
	err := w.err
	w.job, w.err = nil, nil
	return err
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
	w.mu.Lock()
	defer w.mu.Unlock()
	return w.await(w.submit(JobFunc(func(int) error { return f() })))
}

// stop ends the worker, releasing its context, and returns what that
// returned. It must be called once, with no job in flight.
func (w *worker) stop() error {
	close(w.quit)
	<-w.exited
	return w.stopErr
}

// Run runs job.Run(localRank) on every local rank's worker in parallel and
// waits for all of them; it returns the first error. The dispatch itself
// allocates nothing. Run calls are serialized: a job must not call Run.
func (t *Team) Run(job Job) error {
	t.runMu.Lock()
	defer t.runMu.Unlock()
	if err := t.usable(); err != nil {
		return err
	}
	for _, r := range t.ranks {
		r.w.mu.Lock()
		r.tick = r.w.submit(job)
	}
	var first error
	for _, r := range t.ranks {
		err := r.w.await(r.tick)
		r.w.mu.Unlock()
		if err != nil && first == nil {
			first = err
		}
	}
	return first
}

// oneContext reports whether every local rank runs in one context: one
// local rank (NewRank), or New's ranks all on one GPU (WithSharedDevices).
// Then runHere can run a team's short jobs without the workers.
func (t *Team) oneContext() bool {
	for _, r := range t.ranks {
		if r.primary != t.ranks[0].primary {
			return false
		}
	}
	return len(t.ranks) > 0
}

// runHere runs job.Run(localRank) for every local rank in turn (0 first)
// on the calling goroutine, which it locks to its OS thread for the while,
// with that rank's context current; it returns the first error, after
// which no later rank's job runs. A context is made current only where
// the thread has another one or none (with one context for every local
// rank, once; with one a device, once a rank); a thread that had another
// gets it back, one that had none (or one released since, which cannot
// be current again) keeps the last rank's (as a worker's thread keeps
// its own). For short jobs this is cheaper than Run, which
// wakes every worker and waits for each; the jobs must not wait for each
// other. Serialized with Run; a job must not call Run or runHere.
func (t *Team) runHere(job Job) (err error) {
	t.runMu.Lock()
	defer t.runMu.Unlock()
	if t.closed {
		return ErrClosed
	}
	if err := t.Err(); err != nil {
		return err
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	prev, err := t.d.CtxGetCurrent()
	if err != nil {
		return fmt.Errorf("team: RunHere: the calling thread's current context: %w", err)
	}
	cur := prev
	if prev != 0 {
		defer func() {
			if cur == prev {
				return
			}
			// A context released since it was made current here (a
			// closed team's primary context, left on a pooled thread)
			// cannot come back: the thread is then one that had none.
			rerr := t.d.CtxSetCurrent(prev)
			if rerr != nil && !errors.Is(rerr, cuda.ErrInvalidContext) {
				err = errors.Join(err, fmt.Errorf("team: RunHere: making the calling thread's own context current again: %w", rerr))
			}
		}()
	}
	for l, r := range t.ranks {
		if r.primary != cur {
			if err := t.d.CtxSetCurrent(r.primary); err != nil {
				return fmt.Errorf("team: RunHere: making device %d's primary context current on the calling thread: %w", r.dev, err)
			}
			cur = r.primary
		}
		if err := job.Run(l); err != nil {
			return err
		}
	}
	return nil
}
