package grow_test

import (
	"fmt"

	"github.com/nvls-go/nvls/bench/grow"
)

func ExampleConfig_Sizes() {
	cfg := grow.Config{Start: 2 << 20, Target: 1 << 30, Step: 256 << 20}
	for _, mode := range []grow.Mode{grow.Steps, grow.Doubling} {
		sizes, err := cfg.Sizes(mode)
		if err != nil {
			fmt.Println(err)
			return
		}
		fmt.Print(mode, ":")
		for _, s := range sizes {
			fmt.Print(" ", grow.Bytes(s))
		}
		fmt.Println()
	}
	// Output:
	// step: 2 MiB 258 MiB 514 MiB 770 MiB 1 GiB
	// double: 2 MiB 4 MiB 8 MiB 16 MiB 32 MiB 64 MiB 128 MiB 256 MiB 512 MiB 1 GiB
}
