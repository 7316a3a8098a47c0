//go:build mpi

package rankkill_test

import (
	"context"
	"errors"
	"fmt"
	"os"
	"sync"
	"time"

	"github.com/nvls-go/nvls/team"
	"github.com/nvls-go/nvls/team/mpi/rankkill"
)

// Every rank agrees on rank 0's plan (here three in-process ranks; under
// mpirun the MPI bootstrap); after the kill the survivors meet and finish
// through the plan's directory, which rank 0 removes.
func ExampleAgree() {
	boots := team.NewInProcess(3)
	plans := make([]rankkill.Plan, 3)
	var wg sync.WaitGroup
	for r := range 3 {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			plans[r], _ = rankkill.Agree(ctx, boots[r], 2, 10, "")
		})
	}
	wg.Wait()
	fmt.Println("victim", plans[1].Victim, "after", plans[1].After, "iterations; one directory:", plans[0].Dir == plans[2].Dir)

	// Rank 2 is gone: ranks 0 and 1 meet without it, then finish.
	for _, r := range []int{0, 1} {
		wg.Go(func() {
			if err := plans[r].Meet("closed", r, 3, 10*time.Second); err != nil {
				fmt.Println(err)
			}
		})
	}
	wg.Wait()
	_ = plans[1].Finish(1, 3, time.Second)
	err := plans[0].Finish(0, 3, time.Second)
	_, serr := os.Stat(plans[0].Dir)
	fmt.Println("finished:", err, "; directory removed:", errors.Is(serr, os.ErrNotExist))
	for _, b := range boots {
		_ = b.Close()
	}
	// Output:
	// victim 2 after 10 iterations; one directory: true
	// finished: <nil> ; directory removed: true
}
