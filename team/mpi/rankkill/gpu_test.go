//go:build gpu && mpi

package rankkill

// The GPU variant, UNICAST only: one process per GPU. Build here (cgo,
// against Debian's OpenMPI), carry, run on 3 or more GPUs of one host:
//
//	CGO_ENABLED=1 go test -c -tags 'gpu mpi' -o .devbin/rankkill.test ./team/mpi/rankkill
//	mpirun --allow-run-as-root --enable-recovery -np 4 .devbin/rankkill.test -test.run GPURankKill -test.v
//
// and count the survivors' "rankkill: rank R: PASS" lines (np-1 of them;
// mpirun's exit status is 0 whatever they say). No cuMulticast* entry
// point can be called: the team is asked for the unicast transport and
// the driver is wrapped (unicastonly) so that a multicast call fails the
// test without reaching the real driver.

import (
	"context"
	"crypto/rand"
	"flag"
	"fmt"
	"io"
	"log/slog"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/nvls-go/nvls/cuda"
	"github.com/nvls-go/nvls/internal/unicastonly"
	"github.com/nvls-go/nvls/team/mpi"
	"github.com/nvls-go/nvls/team/mpi/internal/fdtest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The last rank dies (SIGKILL) after 200 checked all-reduces (64 KiB
// and 1 MiB in turn) of a unicast team; every survivor's kernel gives up
// on its barrier after 2 s, Sync turns the status word into a
// *collectives.TimeoutError naming the survivor, the team is broken, and
// Close leaves nothing held: no driver object (counted at the calls), no
// descriptor, and cuMemGetInfo where it was before the team (after a
// clean warm-up cycle, see killSetup.warm).
func TestGPURankKill(t *testing.T) { gpuRankKill(t, false) }

// TestGPUGraphRankKill: the same with a graph of 64 all-reduces of 1 MiB
// replayed each iteration; the victim launches its replay of iteration
// 200 and dies while it runs.
func TestGPUGraphRankKill(t *testing.T) { gpuRankKill(t, true) }

func gpuRankKill(t *testing.T, graph bool) {
	w, d, dev := gpuRank(t) // one victim and at least one survivor
	// The driver opens its descriptors with the first context: take the
	// snapshot after it.
	_, err := d.PrimaryCtxRetain(dev)
	require.NoError(t, err)
	defer func() { assert.NoError(t, d.PrimaryCtxRelease(dev)) }()
	fds, err := fdtest.Take()
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	plan, err := Agree(ctx, w, w.Size()-1, 200, "")
	require.NoError(t, err)
	seed := sharedSeed(ctx, t, w)

	s := killSetup{d: d, dev: dev, boot: w, plan: plan, seed: seed,
		kernelTimeout: 2 * time.Second, slack: time.Second, counts: []uint64{16 << 10, 256 << 10},
		graph: graph, graphLen: 64, warm: 20,
		log: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))}
	res := killRun(s) // the victim does not return
	defer func() { require.NoError(t, plan.Finish(w.Rank(), w.Size(), 30*time.Second)) }()
	fmt.Println(res.report(s))
	checkSurvivor(t, s, res)
	// Descriptors: the exported workspace handles and the bootstrap's
	// sockets of the team. MPI's own connections may come and go after a
	// rank died: sockets are listed, not counted.
	added, err := fds.Added()
	require.NoError(t, err)
	var leaked, sockets []string
	for _, fd := range added {
		target, _ := os.Readlink("/proc/self/fd/" + strconv.Itoa(fd))
		if strings.HasPrefix(target, "socket:") {
			sockets = append(sockets, strconv.Itoa(fd)+" -> "+target)
			continue
		}
		leaked = append(leaked, strconv.Itoa(fd)+" -> "+target)
	}
	fmt.Printf("rankkill: rank %d: descriptors opened and not closed: %d %v (sockets, not counted: %v)\n", w.Rank(), len(leaked), leaked, sockets)
	assert.Empty(t, leaked, "rank %d: descriptors left open", w.Rank())
}

// TestGPUCloseInFlight: Close right after 50 all-reduces and a replay of
// a graph of 64, without Sync, one process per GPU (closeInFlight): with
// every rank enqueuing, and with the last rank enqueuing nothing. No rank
// dies: run it without --enable-recovery or with it.
func TestGPUCloseInFlight(t *testing.T) {
	w, d, dev := gpuRank(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	seed := sharedSeed(ctx, t, w)
	for _, straggler := range []bool{false, true} {
		t.Run(fmt.Sprintf("straggler=%v", straggler), func(t *testing.T) {
			s := killSetup{d: d, dev: dev, boot: w, seed: seed,
				kernelTimeout: 2 * time.Second, slack: time.Second, counts: []uint64{16 << 10, 256 << 10},
				graph: true, graphLen: 64, warm: 5,
				log: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))}
			res := closeInFlight(s, straggler)
			fmt.Println(res.report(s, straggler))
			checkInFlight(t, s, res)
		})
	}
}

// TestGPUSoakMPI: the soak (soakRun), one process per GPU, for
// NVLS_SOAK_DURATION (a Go duration; without it the test skips unless
// -test.run names it, then 60 s): buffers of 32 MiB, operations mostly up
// to 1 MiB, one in 30 up to 32 MiB (a reduce-scatter's send or an
// all-gather's recv at most that). Each rank prints one line: "soak: rank
// R: PASS|FAIL: N ops (...), #wrong W, T".
func TestGPUSoakMPI(t *testing.T) {
	w := needWorld(t, 2)
	dur := 60 * time.Second
	if v := os.Getenv("NVLS_SOAK_DURATION"); v != "" {
		var err error
		dur, err = time.ParseDuration(v)
		require.NoError(t, err, "NVLS_SOAK_DURATION")
	} else if run := flag.Lookup("test.run"); run == nil || !strings.Contains(run.Value.String(), "Soak") {
		t.Skip("the soak runs when named (-test.run GPUSoakMPI) or with NVLS_SOAK_DURATION")
	}
	_, d, dev := gpuRank(t)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	seed := sharedSeed(ctx, t, w)
	res := soakRun(soakSetup{d: d, dev: dev, boot: w, seed: seed, bufBytes: 32 << 20, dur: dur,
		log:      slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn})),
		progress: func(line string) { fmt.Printf("soak: rank %d: progress: %s\n", w.Rank(), line) }})
	verdict := "PASS"
	if res.err != nil || res.wrong != 0 || res.ops == 0 {
		verdict = "FAIL"
	}
	fmt.Printf("soak: rank %d (device %d): %s: %v\n", w.Rank(), dev, verdict, res)
	for _, line := range res.firstWrong {
		fmt.Printf("soak: rank %d: wrong: %s\n", w.Rank(), line)
	}
	require.NoError(t, res.err)
	assert.Zero(t, res.wrong, "%v", res.firstWrong)
	assert.NotZero(t, res.ops)
}

// gpuRank is this process's part under mpirun: the world, the driver
// (unicast only: a multicast call fails the test without reaching the
// driver) and its GPU; it skips where there is no launcher, no driver or
// a GPU too few.
func gpuRank(t *testing.T) (*mpi.Bootstrap, cuda.Driver, cuda.Device) {
	t.Helper()
	w := needWorld(t, 2)
	lib, err := cuda.Load()
	if err != nil {
		t.Skipf("no usable CUDA driver: %v", err)
	}
	n, err := lib.DeviceCount()
	require.NoError(t, err)
	if n < w.LocalSize() {
		t.Skipf("%d GPU(s) for %d ranks on this host", n, w.LocalSize())
	}
	d := unicastonly.Driver{Driver: lib, OnRefuse: func(op string) { t.Errorf("%s called", op) }}
	dev, err := mpi.Device(d, w.LocalRank())
	require.NoError(t, err)
	return w, d, dev
}

// TestGPUArgMismatchMPI: the argument-mismatch cases (argCases) under
// mpirun, one process per GPU, the last rank calling otherwise: every
// rank fails with collectives.ErrArgMismatch in far less than the
// kernels' deadline, and some rank names the argument. One line a rank
// and case: "mismatch: rank R: CASE: PASS|FAIL in T: error".
func TestGPUArgMismatchMPI(t *testing.T) {
	w, d, dev := gpuRank(t)
	log := slog.New(slog.NewTextHandler(io.Discard, nil))
	for _, tc := range argCases() {
		t.Run(tc.name, func(t *testing.T) {
			o := runArgCase(d, dev, w, log, tc.call(w.Rank() == w.Size()-1))
			named := checkArgOutcome(t, tc, w.Rank(), o)
			verdict := "PASS"
			if t.Failed() {
				verdict = "FAIL"
			}
			fmt.Printf("mismatch: rank %d: %s: %s in %v: %v\n", w.Rank(), tc.name, verdict, o.took.Round(time.Millisecond), o.err)
			ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
			defer cancel()
			all, err := w.AllGather(ctx, []byte(strconv.FormatBool(named)))
			require.NoError(t, err)
			assert.Contains(t, all, []byte("true"), "no rank named the argument")
		})
	}
}

// sharedSeed is rank 0's fresh random seed, the same on every rank.
func sharedSeed(ctx context.Context, t *testing.T, w *mpi.Bootstrap) [32]byte {
	t.Helper()
	var fresh [32]byte
	_, err := rand.Read(fresh[:])
	require.NoError(t, err)
	seeds, err := w.AllGather(ctx, fresh[:])
	require.NoError(t, err)
	return [32]byte(seeds[0])
}
