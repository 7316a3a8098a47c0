package collectives_test

import (
	"context"
	"fmt"

	"github.com/nvls-go/nvls/collectives"
	"github.com/nvls-go/nvls/cuda"
	"github.com/nvls-go/nvls/simnode"
	"github.com/nvls-go/nvls/team"
)

// The README's program (its "Using it" and "On a laptop" sections show
// this file's code; readme_test.go checks that they match): an all-reduce
// of one slice per GPU, on a simulated node of four GPUs. On a real node,
// pass the driver cuda.Open returns (readme_gpu_test.go).
func Example_readme() {
	ctx := context.Background()
	node := simnode.New(simnode.Config{Devices: 4}) // four simulated GPUs
	defer node.Close()
	data := [][]float32{{1, 2, 3}, {10, 20, 30}, {100, 200, 300}, {1000, 2000, 3000}}
	sums, err := allReduce(ctx, node, data)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(sums)
	// Output: [[1111 2222 3333] [1111 2222 3333] [1111 2222 3333] [1111 2222 3333]]
}

// allReduce sums data[i] (GPU i's slice; all of one length) over the
// GPUs, on driver d: cuda.Open's, or a simulated node.
func allReduce(ctx context.Context, d cuda.Driver, data [][]float32) ([][]float32, error) {
	devs := make([]cuda.Device, len(data))
	for i := range devs {
		devs[i] = cuda.Device(i)
	}
	t, err := team.New(ctx, d, devs) // one process, one rank per GPU (team.NewRank under mpirun)
	if err != nil {
		return nil, err
	}
	defer t.Close()
	c, err := collectives.New(t) // loads the kernels of the team's transport on every GPU
	if err != nil {
		return nil, err
	}
	defer c.Close()

	buf, err := collectives.NewBuffer[float32](t, len(data[0])) // symmetric: the same offset on every GPU, used without a copy
	if err != nil {
		return nil, err
	}
	defer buf.Close()
	for i := range devs {
		if err := buf.CopyIn(i, data[i]); err != nil { // host to GPU i, from any goroutine
			return nil, err
		}
	}
	// In place (send = recv), asynchronous, on each GPU's default stream
	// (nil; collectives.NewStreams makes streams of the library's own).
	if err := collectives.AllReduce(ctx, c, buf, buf, collectives.Sum, nil); err != nil {
		return nil, err
	}
	if err := collectives.Wait(ctx, c, nil); err != nil { // waits, with a deadline: a GPU that never came is an error
		return nil, err
	}
	out := make([][]float32, len(devs))
	for i := range out {
		out[i] = make([]float32, buf.Len())
		if err := buf.CopyOut(out[i], i); err != nil {
			return nil, err
		}
	}
	return out, nil
}
