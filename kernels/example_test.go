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
