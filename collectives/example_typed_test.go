package collectives_test

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"sync"

	"github.com/nvls-go/nvls/collectives"
	"github.com/nvls-go/nvls/cuda"
	"github.com/nvls-go/nvls/simnode"
	"github.com/nvls-go/nvls/team"
)

// An all-reduce of typed buffers on streams the library makes: the
// buffer's Go type gives the element type and its length the count.
func ExampleAllReduce() {
	node := simnode.New(simnode.Config{Devices: 2}) // on GPUs: cuda.Open()
	defer node.Close()
	ctx := context.Background()
	t, err := team.New(ctx, node, []cuda.Device{0, 1}, team.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer t.Close()
	c, err := collectives.New(t)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer c.Close()
	s, err := collectives.NewStreams(t) // one per local rank; or WrapStreams(t, yours)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer s.Close()
	buf, err := collectives.NewBuffer[float32](t, 4) // 4 floats on every GPU
	if err != nil {
		fmt.Println(err)
		return
	}
	defer buf.Close()
	for l := range t.NumLocal() {
		r := float32(t.Rank(l) + 1)
		if err := buf.CopyIn(l, []float32{r, 2 * r, 3 * r, 4 * r}); err != nil {
			fmt.Println(err)
			return
		}
	}
	if err := collectives.AllReduce(ctx, c, buf, buf, collectives.Sum, s); err != nil { // in place
		fmt.Println(err)
		return
	}
	if err := collectives.Wait(ctx, c, s); err != nil {
		fmt.Println(err)
		return
	}
	out := make([]float32, buf.Len())
	for l := range t.NumLocal() {
		if err := buf.CopyOut(out, l); err != nil {
			fmt.Println(err)
			return
		}
		fmt.Printf("rank %d: %v\n", t.Rank(l), out)
	}
	// Output:
	// rank 0: [3 6 9 12]
	// rank 1: [3 6 9 12]
}

// Graph capture: three all-reduces captured once on the library's
// streams, then replayed twice; each replay runs all three. The kernels'
// barrier epochs live in device memory, so replays stay in step however
// many there are.
func ExampleStreams_Capture() {
	node := simnode.New(simnode.Config{Devices: 2})
	defer node.Close()
	ctx := context.Background()
	t, err := team.New(ctx, node, []cuda.Device{0, 1}, team.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer t.Close()
	c, err := collectives.New(t)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer c.Close()
	s, err := collectives.NewStreams(t) // a default stream cannot be captured
	if err != nil {
		fmt.Println(err)
		return
	}
	defer s.Close()
	buf, err := collectives.NewBuffer[int32](t, 2)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer buf.Close()
	for l := range t.NumLocal() {
		if err := buf.CopyIn(l, []int32{1, int32(t.Rank(l))}); err != nil {
			fmt.Println(err)
			return
		}
	}
	g, err := s.Capture(func() error {
		for range 3 { // each doubles [1 r]'s sum over 2 ranks
			if err := collectives.AllReduce(ctx, c, buf, buf, collectives.Sum, s); err != nil {
				return err
			}
		}
		return nil
	})
	if err != nil {
		fmt.Println(err)
		return
	}
	defer g.Close()
	out := make([]int32, 2)
	for replay := 1; replay <= 2; replay++ {
		if err := g.Launch(s); err != nil {
			fmt.Println(err)
			return
		}
		if err := collectives.Wait(ctx, c, s); err != nil {
			fmt.Println(err)
			return
		}
		if err := buf.CopyOut(out, 0); err != nil {
			fmt.Println(err)
			return
		}
		fmt.Printf("after replay %d: %v\n", replay, out)
	}
	// Output:
	// after replay 1: [8 4]
	// after replay 2: [64 32]
}

// One goroutine per GPU, each with its rank's handle (Comm.Ranks), as
// under mpirun each process has its one: the same calls, the same code.
func ExampleComm_Ranks() {
	node := simnode.New(simnode.Config{Devices: 2})
	defer node.Close()
	ctx := context.Background()
	t, err := team.New(ctx, node, []cuda.Device{0, 1}, team.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer t.Close()
	c, err := collectives.New(t)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer c.Close()
	buf, err := collectives.NewBuffer[uint32](t, 3)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer buf.Close()
	out := make([][]uint32, t.NumLocal())
	var wg sync.WaitGroup
	for _, r := range c.Ranks() {
		wg.Add(1)
		go func() { // what a process under mpirun does with its one Rank
			defer wg.Done()
			v := uint32(r.Rank() + 1)
			if err := buf.CopyIn(r.Local(), []uint32{v, 10 * v, 100 * v}); err != nil {
				fmt.Println(err)
				return
			}
			if err := collectives.AllReduce(ctx, r, buf, buf, collectives.Max, nil); err != nil {
				fmt.Println(err)
				return
			}
			if err := collectives.Wait(ctx, r, nil); err != nil {
				fmt.Println(err)
				return
			}
			out[r.Local()] = make([]uint32, 3)
			if err := buf.CopyOut(out[r.Local()], r.Local()); err != nil {
				fmt.Println(err)
			}
		}()
	}
	wg.Wait()
	fmt.Println(out)
	// Output: [[2 20 200] [2 20 200]]
}

// One process driving several GPUs without graphs: WithLaunch(LaunchCaller)
// launches every rank's kernel from the calling goroutine, making each
// GPU's context current in turn, instead of waking a worker thread per GPU
// (NVLS_LAUNCH=caller does the same without a code change).
func ExampleWithLaunch() {
	node := simnode.New(simnode.Config{Devices: 2}) // on GPUs: cuda.Open()
	defer node.Close()
	ctx := context.Background()
	t, err := team.New(ctx, node, []cuda.Device{0, 1}, team.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer t.Close()
	c, err := collectives.New(t, collectives.WithLaunch(collectives.LaunchCaller))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer c.Close()
	s, err := collectives.NewStreams(t)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer s.Close()
	buf, err := collectives.NewBuffer[int32](t, 3)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer buf.Close()
	for l := range t.NumLocal() {
		if err := buf.CopyIn(l, []int32{int32(10 * (t.Rank(l) + 1)), 1, -2}); err != nil {
			fmt.Println(err)
			return
		}
	}
	if err := collectives.AllReduce(ctx, c, buf, buf, collectives.Max, s); err != nil {
		fmt.Println(err)
		return
	}
	if err := collectives.Wait(ctx, c, s); err != nil {
		fmt.Println(err)
		return
	}
	out := make([]int32, buf.Len())
	if err := buf.CopyOut(out, 0); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(out)
	// Output:
	// [20 1 -2]
}

// WithPDL(PDLWait) insists on programmatic dependent launch, which PDLAuto
// (the default) already picks where the devices, the driver and the PTX
// have it; New fails where they do not (ErrInvalid, saying what is
// missing). PDLEarly is refused where ranks share a device.
func ExampleWithPDL() {
	node := simnode.New(simnode.Config{Devices: 2}) // on GPUs: cuda.Open()
	defer node.Close()
	ctx := context.Background()
	t, err := team.New(ctx, node, []cuda.Device{0, 0}, team.WithSharedDevices(), team.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer t.Close()
	c, err := collectives.New(t, collectives.WithPDL(collectives.PDLWait))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer c.Close()
	_, err = collectives.New(t, collectives.WithPDL(collectives.PDLEarly))
	fmt.Println(errors.Is(err, collectives.ErrInvalid))
	// Output:
	// true
}

// WithMinGrid sets how many blocks a launch spreads its vectors over, one
// a thread, before each thread takes four: more blocks move the medium
// sizes faster (DefaultMinGrid, 32, measured on 4 x H200), 0 the fewest
// blocks. Every rank must use the same (New checks it).
func ExampleWithMinGrid() {
	node := simnode.New(simnode.Config{Devices: 2}) // on GPUs: cuda.Open()
	defer node.Close()
	t, err := team.New(context.Background(), node, []cuda.Device{0, 1}, team.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer t.Close()
	c, err := collectives.New(t, collectives.WithMinGrid(8))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer c.Close()
	fmt.Println(c.MinGrid())
	// Output:
	// 8
}

// WithCopyEngineMin: all-gathers (and, in a team of 2 ranks, broadcasts)
// of at least this many bytes a rank move with the copy engines (a
// cuMemcpyDtoDAsync into every peer's recv between two barrier kernels)
// instead of the SMs' stores; the result is the same. Here 4 KiB, to show
// it on a small buffer; the default is DefaultCopyEngineMin.
func ExampleWithCopyEngineMin() {
	node := simnode.New(simnode.Config{Devices: 2}) // on GPUs: cuda.Open()
	defer node.Close()
	ctx := context.Background()
	t, err := team.New(ctx, node, []cuda.Device{0, 1}, team.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer t.Close()
	c, err := collectives.New(t, collectives.WithCopyEngineMin(4<<10))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer c.Close()
	s, err := collectives.NewStreams(t)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer s.Close()
	buf, err := collectives.NewBuffer[float32](t, 2048) // 8 KiB
	if err != nil {
		fmt.Println(err)
		return
	}
	defer buf.Close()
	for l := range t.NumLocal() {
		in := make([]float32, buf.Len())
		for i := range in {
			in[i] = float32(t.Rank(l)*10000 + i)
		}
		if err := buf.CopyIn(l, in); err != nil {
			fmt.Println(err)
			return
		}
	}
	if err := collectives.Broadcast(ctx, c, buf, buf, 1, s); err != nil {
		fmt.Println(err)
		return
	}
	if err := collectives.Wait(ctx, c, s); err != nil {
		fmt.Println(err)
		return
	}
	out := make([]float32, buf.Len())
	if err := buf.CopyOut(out, 0); err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(out[0], out[2047])
	// Output:
	// 10000 12047
}

// WithLLTwoMax: on the unicast transport a reduce above the LL limit and
// up to this many bytes runs the LL kernel in two steps (a reduce-scatter
// of the payload's lines, then every rank's slice to the root), where the
// LL area holds it: from 3 ranks, up to n / 2 times the LL limit. Here 4
// ranks with an LL limit of 4 KiB reduce 8 KiB that way; the result is
// the same as the barrier kernels'. The default is DefaultLLTwoMax; 0
// turns it off.
func ExampleWithLLTwoMax() {
	out, err := onFourRanks(2048, 2, func(ctx context.Context, c *collectives.Comm, buf *collectives.Buffer[float32], s *collectives.Streams) error {
		return collectives.Reduce(ctx, c, buf, buf, collectives.Sum, 2, s)
	}, collectives.WithLLMax(4<<10), collectives.WithLLTwoMax(8<<10))
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(out[0], out[2047]) // 0+1+2+3, and 4 x 2047 + 6
	// Output:
	// 6 8194
}

// WithLLTwoBcastMax: on the unicast transport from 3 ranks, a broadcast
// above the LL limit and up to this many bytes runs LL in two steps (a
// slice of the root's lines to each other rank, which passes it on), the
// LL area sized for it. Here 4 ranks with an LL limit of 4 KiB broadcast
// 32 KiB from rank 2 that way; the result is the same as the barrier
// kernel's. The default is DefaultLLTwoBcastMax; 0 turns it off.
func ExampleWithLLTwoBcastMax() {
	out, err := onFourRanks(8192, 0, func(ctx context.Context, c *collectives.Comm, buf *collectives.Buffer[float32], s *collectives.Streams) error {
		return collectives.Broadcast(ctx, c, buf, buf, 2, s)
	}, collectives.WithLLMax(4<<10), collectives.WithLLTwoBcastMax(32<<10))
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(out[0], out[8191]) // rank 2's: 2 + i
	// Output:
	// 2 8193
}

// WithRingMin: on the unicast transport from 2 ranks, a reduce of f32 or
// an integer type of at least this many bytes runs as a ring (each rank
// adds its piece to its predecessor's partial sum and stores it into its
// successor's FIFO), the FIFO (WithRingBytes) taken from the workspace.
// Here 4 ranks reduce 1 MiB to rank 2 through a 1 MiB FIFO. Off by
// default (0).
func ExampleWithRingMin() {
	out, err := onFourRanks(256<<10, 2, func(ctx context.Context, c *collectives.Comm, buf *collectives.Buffer[float32], s *collectives.Streams) error {
		return collectives.Reduce(ctx, c, buf, buf, collectives.Sum, 2, s)
	}, collectives.WithRingMin(1<<20), collectives.WithRingBytes(1<<20))
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(out[0], out[256<<10-1]) // 0+1+2+3, and 4 x 262143 + 6
	// Output:
	// 6 1.048578e+06
}

// WithReducePullMin: on the unicast transport a reduce of at least this
// many bytes runs one-shot, the root alone loading every peer's send
// (by default from 8 MiB in a team of 2 on GPUs of their own, never in
// bigger teams). Here 4 ranks reduce 1 MiB to rank 2 so.
func ExampleWithReducePullMin() {
	out, err := onFourRanks(256<<10, 2, func(ctx context.Context, c *collectives.Comm, buf *collectives.Buffer[float32], s *collectives.Streams) error {
		fmt.Println(c.Settings().ReducePullMin)
		return collectives.Reduce(ctx, c, buf, buf, collectives.Sum, 2, s)
	}, collectives.WithReducePullMin(1<<20))
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(out[0], out[256<<10-1]) // 0+1+2+3, and 4 x 262143 + 6
	// Output:
	// 1048576
	// 6 1.048578e+06
}

// onFourRanks runs call on a Comm with opts over a 4-rank unicast team on
// a simulated node (on GPUs: cuda.Open()), in place on a buffer of n
// float32 that holds rank + i on each rank, and returns rank's buffer.
func onFourRanks(n, rank int, call func(context.Context, *collectives.Comm, *collectives.Buffer[float32], *collectives.Streams) error, opts ...collectives.Option) ([]float32, error) {
	node := simnode.New(simnode.Config{Devices: 4})
	defer node.Close()
	ctx := context.Background()
	t, err := team.New(ctx, node, []cuda.Device{0, 1, 2, 3}, team.WithTransport(team.Unicast), team.WithLogger(slog.New(slog.DiscardHandler)))
	if err != nil {
		return nil, err
	}
	defer t.Close()
	c, err := collectives.New(t, opts...)
	if err != nil {
		return nil, err
	}
	defer c.Close()
	s, err := collectives.NewStreams(t)
	if err != nil {
		return nil, err
	}
	defer s.Close()
	buf, err := collectives.NewBuffer[float32](t, n)
	if err != nil {
		return nil, err
	}
	defer buf.Close()
	for l := range t.NumLocal() {
		in := make([]float32, n)
		for i := range in {
			in[i] = float32(t.Rank(l) + i)
		}
		if err := buf.CopyIn(l, in); err != nil {
			return nil, err
		}
	}
	if err := call(ctx, c, buf, s); err != nil {
		return nil, err
	}
	if err := collectives.Wait(ctx, c, s); err != nil {
		return nil, err
	}
	out := make([]float32, n)
	return out, buf.CopyOut(out, rank)
}
