//go:build linux

package handletype_test

import (
	"fmt"

	"github.com/nvls-go/nvls/team/mpi/handletype"
)

// Every rank runs Check on its own device and all-gathers the result;
// Decide then gives every rank the same answer.
func ExampleDecide() {
	all := []handletype.Support{
		{OK: true, Channel: "/dev/nvidia-caps-imex-channels/channel0"},
		{Reason: "device 1 reports no fabric handle support"},
	}
	t, why, err := handletype.Decide(all, 1)
	fmt.Println(t, err)
	fmt.Println(why)
	_, _, err = handletype.Decide(all, 2)
	fmt.Println(err)
	// Output:
	// posix-fd <nil>
	// rank 1: device 1 reports no fabric handle support
	// handletype: ranks on several hosts need fabric handles: 2 hosts, and rank 1: device 1 reports no fabric handle support
}
