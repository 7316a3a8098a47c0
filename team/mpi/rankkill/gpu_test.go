//go:build gpu && mpi

package rankkill

// The GPU variant, UNICAST only: one process per GPU. Build here (cgo,
// against Debian's OpenMPI), carry, run on 3 or more GPUs of one host:
//
//	CGO_ENABLED=1 go test -c -tags 'gpu mpi' -o .devbin/rankkill.test ./team/mpi/rankkill
//	mpirun --allow-run-as-root --enable-recovery -np 4 .devbin/rankkill.test -test.run GPURankKill -test.v
//
// and count the survivors' "rankkill: rank R: PASS" lines (np-1 of them;
// mpirun's exit status is 0 whatever they say). No cuMulticast* entry
// point can be called: the team is asked for the unicast transport and
// the driver is wrapped (unicastonly) so that a multicast call fails the
// test without reaching the real driver.

import (
	"context"
	"crypto/rand"
	"fmt"
	"log/slog"
	"os"
	"testing"
	"time"

	"github.com/nvls-go/nvls/cuda"
	"github.com/nvls-go/nvls/internal/unicastonly"
	"github.com/nvls-go/nvls/team/mpi"
	"github.com/stretchr/testify/require"
)

// The last rank dies (SIGKILL) after 200 checked all-reduces (64 KiB
// one-shot and 1 MiB two-shot in turn) of a unicast team; every
// survivor's kernel gives up on its barrier after 2 s, Sync turns the
// status word into a *collectives.TimeoutError naming the survivor, the
// team is broken, and Close leaves cuMemGetInfo where it was before the
// team.
func TestGPURankKill(t *testing.T) {
	w := needWorld(t, 2) // one victim and at least one survivor
	lib, err := cuda.Load()
	if err != nil {
		t.Skipf("no usable CUDA driver: %v", err)
	}
	n, err := lib.DeviceCount()
	require.NoError(t, err)
	if n < w.LocalSize() {
		t.Skipf("%d GPU(s) for %d ranks on this host", n, w.LocalSize())
	}
	d := unicastonly.Driver{Driver: lib, OnRefuse: func(op string) { t.Errorf("%s called", op) }}
	dev, err := mpi.Device(d, w.LocalRank())
	require.NoError(t, err)
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	plan, err := Agree(ctx, w, w.Size()-1, 200, "")
	require.NoError(t, err)
	var fresh [32]byte
	_, err = rand.Read(fresh[:])
	require.NoError(t, err)
	seeds, err := w.AllGather(ctx, fresh[:])
	require.NoError(t, err)

	s := killSetup{d: d, dev: dev, boot: w, plan: plan, seed: [32]byte(seeds[0]),
		kernelTimeout: 2 * time.Second, counts: []uint64{16 << 10, 256 << 10},
		log: slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelWarn}))}
	res := killRun(s) // the victim does not return
	defer func() { require.NoError(t, plan.Finish(w.Rank(), w.Size(), 30*time.Second)) }()
	fmt.Printf("rankkill: %v\n", res.o)
	fmt.Printf("rankkill: rank %d (device %d): cuMemGetInfo free before the team %d, after Close %d\n", res.rank, res.dev, res.before, res.after)
	checkSurvivor(t, s, res)
}
