//go:build linux

package fdpass_test

import (
	"context"
	"fmt"
	"os"
	"sync"
	"syscall"
	"time"

	"github.com/nvls-go/nvls/team/mpi/fdpass"
)

// Two ranks (here goroutines; normally processes, with the token sent by
// rank 0 through the bootstrap) exchange descriptors of temporary files
// and read each other's through the descriptor they received.
func ExampleServer_Exchange() {
	token, err := fdpass.NewToken()
	if err != nil {
		panic(err)
	}
	const n = 2
	srvs := make([]*fdpass.Server, n)
	paths := make([]string, n)
	for r := range n {
		srvs[r], err = fdpass.Listen(fdpass.Config{Token: token, Rank: r, Size: n, Job: "example"})
		if err != nil {
			panic(err)
		}
		defer srvs[r].Close()
		paths[r] = srvs[r].Path()
	}
	got := make([][]int, n)
	var wg sync.WaitGroup
	for r := range n {
		f, err := os.CreateTemp("", "fdpass-example-")
		if err != nil {
			panic(err)
		}
		os.Remove(f.Name())
		fmt.Fprintf(f, "hello from rank %d", r)
		defer f.Close()
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			fds, err := srvs[r].Exchange(ctx, 1, paths, int(f.Fd()))
			if err != nil {
				panic(err)
			}
			got[r] = fds
		})
	}
	wg.Wait()
	for r := range n {
		peer := 1 - r
		buf := make([]byte, 64)
		m, _ := syscall.Pread(got[r][peer], buf, 0)
		fmt.Printf("rank %d read: %s\n", r, buf[:m])
		for _, fd := range got[r] {
			syscall.Close(fd) // the receiver owns what it got
		}
	}
	// Output:
	// rank 0 read: hello from rank 1
	// rank 1 read: hello from rank 0
}
