package team

import (
	"context"
	"errors"
	"fmt"
	"runtime"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/nvls-go/nvls/cuda"
	"github.com/nvls-go/nvls/cuda/sim"
)

// countJob adds its rank to a per-rank counter and fails on one chosen call.
type countJob struct {
	hits   []atomic.Int64
	failAt int64 // the call number (per rank 0) that fails; 0: never
}

var errCount = errors.New("count job: chosen failure")

func (j *countJob) Run(local int) error {
	n := j.hits[local].Add(1)
	if local == 0 && n == j.failAt {
		return fmt.Errorf("call %d: %w", n, errCount)
	}
	return nil
}

// The dispatch through req/fin counters, with the workers spinning, parked
// (no spin) and in between (a spin shorter than the gaps between jobs):
// every job runs exactly once on every rank, results come back to the
// right caller, and do() from other goroutines interleaves safely.
func TestWorkerDispatch(t *testing.T) {
	// (With 2 processors, as in CI, only the 1-rank teams spin: see
	// workerSpin.)
	cases := []struct {
		ranks int
		spin  time.Duration
	}{{4, 0}, {1, 20 * time.Microsecond}, {1, time.Millisecond}, {4, time.Millisecond}}
	for _, c := range cases {
		spin := c.spin
		t.Run(fmt.Sprintf("ranks=%d/spin=%v", c.ranks, spin), func(t *testing.T) {
			node := sim.New(sim.Config{Devices: c.ranks})
			require.NoError(t, node.Init())
			devs := make([]cuda.Device, c.ranks)
			for i := range devs {
				devs[i] = cuda.Device(i)
			}
			tm, err := New(context.Background(), node, devs,
				WithTransport(Unicast), WithWorkerSpin(spin), WithWorkspaceSize(2<<20))
			require.NoError(t, err)
			defer func() { require.NoError(t, tm.Close()); require.NoError(t, node.CheckNoLeaks()) }()

			const runs = 1000
			j := &countJob{hits: make([]atomic.Int64, c.ranks), failAt: runs / 2}
			var wg sync.WaitGroup
			var doCalls atomic.Int64
			stop := make(chan struct{})
			// Side traffic through do() on every worker while Run goes on.
			for _, r := range tm.ranks {
				wg.Add(1)
				go func() {
					defer wg.Done()
					for {
						select {
						case <-stop:
							return
						default:
						}
						dev := r.dev
						require.NoError(t, r.w.do(func() error {
							if _, err := node.CtxGetCurrent(); err != nil {
								return err
							}
							doCalls.Add(1)
							_ = dev
							return nil
						}))
						time.Sleep(50 * time.Microsecond) // longer than the short spin: the worker parks now and then
					}
				}()
			}
			failures := 0
			for i := 1; i <= runs; i++ {
				if err := tm.Run(j); err != nil {
					require.ErrorIs(t, err, errCount)
					require.Equal(t, int64(runs/2), j.hits[0].Load())
					failures++
				}
				if i%100 == 0 {
					time.Sleep(2 * time.Millisecond) // workers park
				}
			}
			close(stop)
			wg.Wait()
			require.Equal(t, 1, failures)
			for r := range j.hits {
				require.Equal(t, int64(runs), j.hits[r].Load(), "rank %d", r)
			}
			require.Positive(t, doCalls.Load())
		})
	}
}

// Spinning needs a processor per worker and one for the caller.
func TestWorkerSpinNeedsProcessors(t *testing.T) {
	p := runtime.GOMAXPROCS(0)
	require.Equal(t, time.Duration(0), workerSpin(p, DefaultWorkerSpin))
	if p > 1 {
		require.Equal(t, DefaultWorkerSpin, workerSpin(p-1, DefaultWorkerSpin))
	}
	require.Equal(t, time.Duration(0), workerSpin(0, 0))
}

// BenchmarkRun is the cost of one Run with a job that does nothing: the
// dispatch to every worker and back. Parked: the workers sleep between jobs
// (WithWorkerSpin(0)); spinning: the default.
func BenchmarkRun(b *testing.B) {
	for _, n := range []int{1, 2, 4} {
		for _, spin := range []time.Duration{0, DefaultWorkerSpin} {
			mode := "spinning"
			if spin == 0 {
				mode = "parked"
			}
			b.Run(fmt.Sprintf("ranks=%d/%s", n, mode), func(b *testing.B) {
				node := sim.New(sim.Config{Devices: n})
				require.NoError(b, node.Init())
				devs := make([]cuda.Device, n)
				for i := range devs {
					devs[i] = cuda.Device(i)
				}
				tm, err := New(context.Background(), node, devs, WithTransport(Unicast), WithWorkerSpin(spin), WithWorkspaceSize(2<<20))
				require.NoError(b, err)
				defer tm.Close()
				if spin > 0 && workerSpin(n, spin) == 0 {
					b.Skipf("GOMAXPROCS %d leaves no processor to spin on for %d workers and the caller", runtime.GOMAXPROCS(0), n)
				}
				j := &noopJob{}
				b.ReportAllocs()
				b.ResetTimer()
				for b.Loop() {
					if err := tm.Run(j); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}
