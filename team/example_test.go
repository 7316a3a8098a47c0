package team_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"

	"github.com/nvls-go/nvls/cuda"
	"github.com/nvls-go/nvls/cuda/sim"
	"github.com/nvls-go/nvls/team"
)

// A team over the four GPUs of a (simulated) node, one process driving
// all of them; on a real node pass the driver from cuda.Open instead.
func ExampleNew() {
	node := sim.New(sim.Config{Devices: 4})
	defer node.Close()

	t, err := team.New(context.Background(), node, []cuda.Device{0, 1, 2, 3},
		team.WithWorkspaceSize(1<<20), team.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer t.Close()
	fmt.Println("ranks:", t.Size(), "local:", t.NumLocal())
	fmt.Println("transport:", t.Transport(), "-", t.Reason())
	fmt.Println(t.Footprint())

	// A symmetric buffer: the same offset in every rank's workspace.
	buf, err := t.Alloc(1000)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println("buffer: offset", buf.Offset(), "size", buf.Size())
	_, inside := t.Contains(2, buf.Ptr(2), buf.Size())
	fmt.Println("rank 2's copy is in its workspace:", inside)
	fmt.Println(t.Free(buf))
	// Output:
	// ranks: 4 local: 4
	// transport: multicast - auto: all 4 devices support multicast
	// workspace 2097152 B (data 1048576, signal 65536, padding 983040); virtual only: peers 6291456 B, multicast 2097152 B
	// buffer: offset 0 size 1008
	// rank 2's copy is in its workspace: true
	// <nil>
}

// countJob counts the ranks it ran on; a pointer to it is passed to Run,
// so the dispatch allocates nothing.
type countJob struct {
	mu    sync.Mutex
	ranks int
}

func (j *countJob) Run(localRank int) error {
	j.mu.Lock()
	j.ranks++
	j.mu.Unlock()
	return nil
}

// Run hands a job to every rank's worker (its OS thread, with the rank's
// device context current) and waits for all of them.
func ExampleTeam_Run() {
	node := sim.New(sim.Config{Devices: 2})
	defer node.Close()
	t, err := team.New(context.Background(), node, []cuda.Device{0, 1},
		team.WithWorkspaceSize(1<<20), team.WithTransport(team.Unicast), team.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer t.Close()
	job := &countJob{}
	fmt.Println(t.Run(job), job.ranks)
	fmt.Println(t.Transport(), "-", t.Reason())
	// Output:
	// <nil> 2
	// unicast - asked by WithTransport(unicast) on every rank
}

// The in-process bootstrap: ranks are goroutines.
func ExampleNewInProcess() {
	boots := team.NewInProcess(3)
	out := make([][][]byte, 3)
	var wg sync.WaitGroup
	for _, b := range boots {
		wg.Add(1)
		go func() {
			defer wg.Done()
			out[b.Rank()], _ = b.AllGather(context.Background(), []byte(fmt.Sprintf("rank %d", b.Rank())))
		}()
	}
	wg.Wait()
	for _, m := range out[1] {
		fmt.Println(string(m))
	}
	// Output:
	// rank 0
	// rank 1
	// rank 2
}

// When the transport is chosen automatically and the fabric cannot serve
// multicast (here: the node's only multicast slot is taken), every rank
// falls back to unicast, with a WARN line and a Reason that say why. When
// multicast was asked for, the same failure is an error that says what is
// likely wrong and what to do.
func ExampleTeam_Fallback() {
	node := sim.New(sim.Config{Devices: 2, MaxMulticastObjects: 1})
	defer node.Close()
	quiet := team.WithLogger(slog.New(slog.DiscardHandler))
	ctx := context.Background()
	devs := []cuda.Device{0, 1}

	first, err := team.New(ctx, node, devs, team.WithWorkspaceSize(1<<20), quiet)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer first.Close()
	fmt.Println("first:", first.Transport())

	second, err := team.New(ctx, node, devs, team.WithWorkspaceSize(1<<20), quiet)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer second.Close()
	fmt.Println("second:", second.Transport())
	fmt.Println(second.Reason())
	fb := second.Fallback()
	fmt.Println(fb.Step, "on rank", fb.Rank, "-", fb.DriverCall())

	_, err = team.New(ctx, node, devs, team.WithWorkspaceSize(1<<20), team.WithTransport(team.Multicast), quiet)
	var fe *team.FabricError
	fmt.Println(errors.As(err, &fe), errors.Is(err, team.ErrFabricNotReady), errors.Is(err, cuda.ErrOutOfMemory))
	// Output:
	// first: multicast
	// second: unicast
	// auto: multicast failed at create multicast object on rank 0 (cuMulticastCreate: CUDA_ERROR_OUT_OF_MEMORY (2)); fell back to unicast
	// create multicast object on rank 0 - cuMulticastCreate: CUDA_ERROR_OUT_OF_MEMORY (2)
	// true true true
}
