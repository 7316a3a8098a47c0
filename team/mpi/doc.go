//go:build mpi

// Package mpi is the bootstrap of a team whose ranks are separate
// processes, one per GPU, started by mpirun: a team.Bootstrap over MPI
// (github.com/sbromberger/gompi and OpenMPI) and Unix-socket descriptor
// passing (package fdpass).
//
// It is the only package of the module that needs cgo, and every file of it
// carries the build tag mpi, so that the default build stays cgo-free:
// build with -tags mpi (CGO_ENABLED=1, with OpenMPI's headers and library
// where Debian and Ubuntu put them: scripts/install-mpi.sh installs them).
//
// # Use
//
//	boot, err := mpi.New(ctx)              // MPI_Init_thread on first use
//	defer boot.Close()                     // MPI_Finalize when the last one closes
//	dev, err := mpi.Device(drv, boot.LocalRank())
//	t, err := team.NewRank(ctx, drv, dev, boot, team.WithTransport(team.Unicast))
//
// # MPI's life cycle
//
// MPI is initialized once per process, with MPI_THREAD_MULTIPLE (goroutines
// move between OS threads, and this package calls MPI from several
// goroutines): New calls Init, which does it the first time. MPI can be
// finalized only once and never restarted: the last Bootstrap's Close
// calls MPI_Finalize, unless KeepMPI was given to New, in which case the
// program calls Finalize itself before it exits (a rank that exits without
// MPI_Finalize makes mpirun fail the job). After Finalize, New returns
// ErrFinalized.
//
// # Collectives and deadlines
//
// Each Bootstrap talks on its own communicator (created with
// MPI_Comm_create over all ranks of MPI_COMM_WORLD), so its messages never
// match the program's own. AllGather gathers to rank 0, which sends the
// result back; Barrier is an AllGather of nothing. gompi has no Allgather,
// and its BcastBytes passes MPI_INT32_T with a byte count (it writes four
// times past the slice), so everything is built on MPI_Send and MPI_Recv of
// bytes; every receive goes into a buffer with guard bytes that are checked
// afterwards.
//
// Every collective (AllGather, Barrier, AllGatherFDs) and New itself is
// bounded by its context's deadline; a context without one gets the
// default timeout: WithTimeout, else NVLS_SETUP_TIMEOUT (a Go duration or
// whole seconds, as package team reads it; a bad value is an error from
// New), else DefaultTimeout. When the deadline passes, the ranks that did
// not arrive are named: a rank that gives up returns a
// *team.MissingRanksError (matching context.DeadlineExceeded) whose
// Missing lists them; a rank whose deadline passed waiting for rank 0's
// answer names rank 0. The error says which deadline passed: the
// timeout and where it came from ("setup deadline
// NVLS_SETUP_TIMEOUT=90s", "setup deadline WithTimeout(2m0s)"), or the
// caller's context's. AllGatherFDs names the ranks whose descriptors did
// not come, or that could not be reached. New begins with an exchange on
// MPI_COMM_WORLD (tag 32767) before it creates its communicator, so that a
// rank that never calls New (it died, or is stuck elsewhere) is named
// (Op "New") instead of leaving the others inside MPI_Comm_create.
//
// Blocking MPI calls cannot take a context and cannot be interrupted, so
// the deadlines work this way: receives are MPI_Iprobe polling loops (with
// a backoff from 10 µs to 1 ms) that end at the deadline; rank 0 stops
// gathering a little before it, so that it can tell the ranks that did
// arrive which ones did not. Sends run on a goroutine and are waited for
// with a timer. What stays blocked when a deadline passes: a send that
// timed out cannot be cancelled (gompi has no MPI_Isend/MPI_Cancel), so
// its goroutine and OS thread stay in MPI_Send until the peer receives or
// the job ends; MPI_Init is not bounded at all; MPI_Comm_create in New
// runs only once every rank has said hello, but a rank that dies between
// the hello and it leaves that goroutine blocked; and MPI_Finalize, which
// waits for the other ranks, is abandoned after the timeout with its
// goroutine left behind (Close then returns an error). A rank that dies
// makes mpirun end the whole job unless it was started with
// --enable-recovery; with it, the survivors' collectives fail naming the
// dead rank (package rankkill tests this under mpirun); their
// MPI_Finalize usually returns (OpenMPI 4.1.4), but MPI leaves it
// undefined after a failure and it has hung, so it stays bounded. After any failed collective the
// Bootstrap is broken: every later collective returns the first error
// (matching ErrBroken).
//
// # Descriptors and handles
//
// AllGatherFDs passes POSIX file descriptors between the ranks of one
// host with package fdpass: every rank listens on a socket in a private
// directory; rank 0's random job token reaches the others through MPI; every
// connection is checked (SO_PEERCRED: same uid; the token) and refusals are
// logged. The descriptors returned belong to the caller, who closes them
// once imported. Close removes the socket and its directory.
//
// HandleType decides, collectively, whether the ranks share handles as
// POSIX descriptors or as fabric handles (package handletype: the device
// supports them and an IMEX channel is usable on every rank), and logs the
// choice and why at INFO.
//
// # Local rank and device
//
// LocalRank is the rank among the processes on this host: the launcher's
// (OMPI_COMM_WORLD_LOCAL_RANK, MPI_LOCALRANKID, SLURM_LOCALID), else
// computed from the host names and boot ids all-gathered in New. Device
// maps it to a device ordinal of the driver (local rank i on the i-th
// visible device).
package mpi
