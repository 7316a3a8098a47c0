//go:build mpi

// Command example brings up a unicast team with one process per GPU under
// mpirun, through the MPI bootstrap of team/mpi: every rank allocates a
// symmetric buffer, writes data of its own into it, and reads every
// peer's buffer through its peer mapping and checks it.
//
// Build (cgo, against OpenMPI) and run on a node with 2 or more GPUs:
//
//	CGO_ENABLED=1 go build -tags mpi -o mpi-example ./team/mpi/example
//	mpirun --allow-run-as-root -np 4 ./mpi-example -size 16777216
//
// It never calls a cuMulticast* entry point: the team is asked for the
// unicast transport, and the driver is wrapped so that a multicast call
// would fail instead of reaching the driver. (Separate processes cannot
// share the simulated node, so this runs on GPUs only.)
package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"os"
	"time"

	"github.com/nvls-go/nvls/cuda"
	"github.com/nvls-go/nvls/internal/unicastonly"
	"github.com/nvls-go/nvls/team"
	"github.com/nvls-go/nvls/team/mpi"
)

func main() {
	size := flag.Uint64("size", 16<<20, "buffer size in bytes")
	timeout := flag.Duration("timeout", 2*time.Minute, "deadline of the whole run")
	flag.Parse()
	if err := run(*size, *timeout); err != nil {
		fmt.Fprintln(os.Stderr, "example:", err)
		os.Exit(1)
	}
}

// data is what rank r writes: bytes that differ from rank to rank and
// along the buffer, which every rank can compute for every other.
func data(r int, size uint64) []byte {
	out := make([]byte, size)
	x := uint32(2654435761)*uint32(r+1) ^ 0x9E3779B9
	for i := range out {
		x ^= x << 13
		x ^= x >> 17
		x ^= x << 5
		out[i] = byte(x)
	}
	return out
}

func run(size uint64, timeout time.Duration) (err error) {
	ctx, cancel := context.WithTimeout(context.Background(), timeout)
	defer cancel()
	log := slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: slog.LevelInfo}))

	// 1. The bootstrap: MPI_Init, rank 0's job token to every rank, the
	// descriptor sockets. Close finalizes MPI.
	boot, err := mpi.New(ctx, mpi.WithLogger(log))
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, boot.Close()) }()

	// 2. The driver and this rank's GPU (local rank i on device i).
	d, dev, err := openDevice(ctx, boot)
	if err != nil {
		return err
	}

	// 3. The team: one rank per process, unicast; allocations travel as
	// POSIX FDs through the bootstrap's AllGatherFDs.
	tm, err := team.NewRank(ctx, d, dev, boot, team.WithTransport(team.Unicast), team.WithWorkspaceSize(size+(16<<20)), team.WithLogger(log))
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, tm.Close()) }()
	buf, err := tm.Alloc(size)
	if err != nil {
		return err
	}
	defer func() { err = errors.Join(err, tm.Free(buf)) }()

	// 4. Write this rank's data into its own copy of the buffer.
	me := boot.Rank()
	if err := tm.Run(team.JobFunc(func(l int) error {
		return cuda.CopyHtoD(d, buf.Ptr(l), data(me, size))
	})); err != nil {
		return fmt.Errorf("rank %d: write: %w", me, err)
	}
	if err := boot.Barrier(ctx); err != nil {
		return err
	}

	// 5. Read every rank's copy through the peer mappings and check it.
	checkErr := tm.Run(team.JobFunc(func(l int) error {
		return checkPeers(d, buf, l, boot.Size(), size)
	}))
	// Nobody frees its buffer while a peer may still read it.
	if err := boot.Barrier(ctx); err != nil {
		return errors.Join(checkErr, err)
	}
	if checkErr != nil {
		return fmt.Errorf("rank %d (device %d): %w", me, dev, checkErr)
	}
	fmt.Printf("rank %d (device %d): read all %d ranks' %d-byte buffers through the peer mappings: correct\n", me, dev, boot.Size(), size)
	return nil
}

// openDevice loads the driver, wrapped so that no multicast call reaches
// it, and picks this rank's GPU; it prints what the rank got.
func openDevice(ctx context.Context, boot *mpi.Bootstrap) (cuda.Driver, cuda.Device, error) {
	lib, err := cuda.Load()
	if err != nil {
		return nil, 0, err
	}
	d := unicastonly.Driver{Driver: lib}
	dev, err := mpi.Device(d, boot.LocalRank())
	if err != nil {
		return nil, 0, err
	}
	ht, why, err := boot.HandleType(ctx, d, dev)
	if err != nil {
		return nil, 0, err
	}
	fmt.Printf("rank %d/%d: local rank %d (from %s), device %d; handles would travel as %v: %s\n",
		boot.Rank(), boot.Size(), boot.LocalRank(), boot.LocalRankSource(), dev, ht, why)
	return d, dev, nil
}

// checkPeers reads every rank's copy of buf on local device l through
// the peer mapping (a device copy into a scratch allocation, then to the
// host) and compares it with what that rank wrote.
func checkPeers(d cuda.Driver, buf team.Buffer, l, ranks int, size uint64) error {
	scratch, err := d.MemAlloc(size)
	if err != nil {
		return err
	}
	defer d.MemFree(scratch)
	host := make([]byte, size)
	for q := range ranks {
		if err := d.MemcpyDtoD(scratch, buf.PeerPtr(l, q), size); err != nil {
			return fmt.Errorf("read rank %d's copy: %w", q, err)
		}
		if err := cuda.CopyDtoH(d, host, scratch); err != nil {
			return err
		}
		if !bytes.Equal(host, data(q, size)) {
			return fmt.Errorf("rank %d's copy, read through the peer mapping, is wrong", q)
		}
	}
	return nil
}
