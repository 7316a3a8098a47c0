package kernels_test

import (
	"fmt"

	"github.com/nvls-go/nvls/kernels"
)

func ExampleAllReduceName() {
	fmt.Println(kernels.AllReduceName(kernels.BF16, kernels.Max, kernels.TwoShot))
	fmt.Println(kernels.AllReduceName(kernels.F32, kernels.Sum, kernels.OneShot))
	// Output:
	// nvls_allreduce_twoshot_bf16_max
	// nvls_allreduce_oneshot_f32_sum
}

func ExampleCheckSupported() {
	fmt.Println(kernels.CheckSupported(kernels.Unicast, kernels.F32, kernels.Max))
	fmt.Println(kernels.CheckSupported(kernels.Multicast, kernels.F32, kernels.Max))
	fmt.Println(kernels.AllowedOps(kernels.Multicast, kernels.U64))
	// Output:
	// <nil>
	// kernels: f32 max is not supported by the multicast flavor (allowed for f32: sum)
	// [sum min max]
}

func ExampleStatus() {
	s := kernels.Status{Word: kernels.TimeoutStatus(kernels.OpBroadcast, 0, 3)}
	fmt.Println(s)
	// Output:
	// broadcast timed out in barrier phase 0 (block 3)
}

// The LL all-reduce's entry point for bf16 sum, and the LL area a team of
// 8 ranks needs for payloads up to 64 KiB.
func ExampleLLAreaBytes() {
	fmt.Println(kernels.AllReduceName(kernels.BF16, kernels.Sum, kernels.LL))
	fmt.Println(kernels.LLAreaBytes(64<<10, 8))
	// Output:
	// nvls_allreduce_ll_bf16_sum
	// 2097152
}
