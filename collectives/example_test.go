package collectives_test

import (
	"context"
	"fmt"
	"log/slog"

	"github.com/nvls-go/nvls/collectives"
	"github.com/nvls-go/nvls/cuda"
	"github.com/nvls-go/nvls/simnode"
	"github.com/nvls-go/nvls/team"
)

// The raw-pointer engine under the typed functions (ExampleAllReduce is
// the same call on a Buffer): an all-reduce over the two GPUs of a
// (simulated) node on a team buffer's pointers, count and element type
// given apart, on streams made on each rank's worker. On a real node pass
// the driver from cuda.Open.
func ExampleComm_AllReduce() {
	node := simnode.New(simnode.Config{Devices: 2})
	defer node.Close()
	ctx := context.Background()
	t, err := team.New(ctx, node, []cuda.Device{0, 1},
		team.WithWorkspaceSize(16<<20), team.WithLogger(slog.New(slog.DiscardHandler)))
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

	// One stream per rank, and a symmetric buffer holding 4 floats: rank r
	// starts with (r+1) * [1 2 3 4].
	const count = 4
	buf, err := t.Alloc(count * 4)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer t.Free(buf)
	streams := make([]cuda.Stream, t.NumLocal())
	ptrs := make([]cuda.DevicePtr, t.NumLocal())
	for l := range ptrs {
		ptrs[l] = buf.Ptr(l)
		r := float32(t.Rank(l) + 1)
		if err := team.CopyIn(buf, l, []float32{r, 2 * r, 3 * r, 4 * r}); err != nil {
			fmt.Println(err)
			return
		}
	}
	// Streams of its own for each rank: created on the rank's worker,
	// where its device's context is current.
	err = t.Run(team.JobFunc(func(l int) error {
		s, err := node.StreamCreate(cuda.StreamNonBlocking)
		streams[l] = s
		return err
	}))
	if err != nil {
		fmt.Println(err)
		return
	}
	defer t.Run(team.JobFunc(func(l int) error { return node.StreamDestroy(streams[l]) }))

	// In place: send and recv are the same buffer.
	if err := c.AllReduce(ctx, ptrs, ptrs, count, collectives.F32, collectives.Sum, streams); err != nil {
		fmt.Println(err)
		return
	}
	if err := c.Sync(ctx, streams); err != nil {
		fmt.Println(err)
		return
	}
	for l := range ptrs {
		vals := make([]float32, count)
		if err := team.CopyOut(vals, buf, l); err != nil {
			fmt.Println(err)
			return
		}
		fmt.Printf("rank %d: %v\n", t.Rank(l), vals)
	}
	// Output:
	// rank 0: [3 6 9 12]
	// rank 1: [3 6 9 12]
}

func ExampleParseDType() {
	for _, s := range []string{"float", "half", "bfloat16", "int32", "u64", "f64"} {
		dt, err := collectives.ParseDType(s)
		if err != nil {
			fmt.Println(err)
			continue
		}
		fmt.Println(s, "->", dt, dt.Size(), "bytes")
	}
	// Output:
	// float -> f32 4 bytes
	// half -> f16 2 bytes
	// bfloat16 -> bf16 2 bytes
	// int32 -> s32 4 bytes
	// u64 -> u64 8 bytes
	// kernels: invalid argument: unknown element type "f64" (want f32|float|float32|fp32, f16|half|float16|fp16, bf16|bfloat16, s32|int32|int|i32, u32|uint32, u64|uint64)
}

// A reduce-scatter and an all-gather, both in place, over two
// (simulated) GPUs: together an all-reduce. Rank r starts with (r+1) * [1
// 2 3 4]; the reduce-scatter leaves rank r slice r of the sum (2 floats)
// where it was (buf.Own(2): each rank's own slot), the all-gather sends
// every slice to every rank.
func ExampleReduceScatter() {
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
	s, err := collectives.NewStreams(t)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer s.Close()
	buf, err := collectives.NewBuffer[float32](t, 4)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer buf.Close()
	mine, err := buf.Own(2)
	if err != nil {
		fmt.Println(err)
		return
	}
	for l := range t.NumLocal() {
		r := float32(t.Rank(l) + 1)
		if err := buf.CopyIn(l, []float32{r, 2 * r, 3 * r, 4 * r}); err != nil {
			fmt.Println(err)
			return
		}
	}
	if err := collectives.ReduceScatter(ctx, c, buf, mine, collectives.Sum, s); err != nil {
		fmt.Println(err)
		return
	}
	if err := collectives.AllGather(ctx, c, mine, buf, s); err != nil {
		fmt.Println(err)
		return
	}
	if err := collectives.Wait(ctx, c, s); err != nil {
		fmt.Println(err)
		return
	}
	vals := make([]float32, 4)
	for l := range t.NumLocal() {
		if err := buf.CopyOut(vals, l); err != nil {
			fmt.Println(err)
			return
		}
		fmt.Printf("rank %d: %v\n", t.Rank(l), vals)
	}
	// Output:
	// rank 0: [3 6 9 12]
	// rank 1: [3 6 9 12]
}
