package simnode_test

import (
	"fmt"
	"runtime"

	"github.com/nvls-go/nvls/internal/kabi"
	"github.com/nvls-go/nvls/kernels"
	"github.com/nvls-go/nvls/simnode"
)

// A node of two simulated GPUs runs nvls's kernels: their PTX loads on it
// as on a GPU (a bare sim.New node has no kernels and refuses it).
func ExampleNew() {
	node := simnode.New(simnode.Config{Devices: 2})
	defer node.Close()
	runtime.LockOSThread() // the current context is per OS thread
	defer runtime.UnlockOSThread()
	if err := node.Init(); err != nil {
		fmt.Println(err)
		return
	}
	ctx, _ := node.PrimaryCtxRetain(0)
	defer node.PrimaryCtxRelease(0)
	_ = node.CtxSetCurrent(ctx)
	m, err := kabi.Load(node, kernels.Multicast)
	if err != nil {
		fmt.Println(err)
		return
	}
	defer m.Close()
	fmt.Println(m.Flavor(), "kernels loaded")
	// Output: multicast kernels loaded
}
