package kabi_test

import (
	"fmt"

	"github.com/nvls-go/nvls/internal/kabi"
	"github.com/nvls-go/nvls/kernels"
)

func ExampleStatus() {
	s := kabi.Status{Word: kabi.TimeoutStatus(kernels.OpBroadcast, 0, 3)}
	fmt.Println(s)
	// Output:
	// broadcast timed out in barrier phase 0 (block 3)
}

// The LL all-reduce's entry point for bf16 sum, and the LL area a team of
// 8 ranks needs for payloads up to 64 KiB.
func ExampleLLAreaBytes() {
	fmt.Println(kernels.AllReduceName(kernels.BF16, kernels.Sum, kernels.LL))
	fmt.Println(kabi.LLAreaBytes(64<<10, 8))
	// Output:
	// nvls_allreduce_ll_bf16_sum
	// 2097152
}
