//go:build mpi

// Package rankkill is the rank-kill fault test of one-process-per-GPU
// teams (issue 8): under mpirun, one rank kills itself (SIGKILL) in the
// middle of a loop of collectives, and the others must return errors
// within their deadline, naming what went wrong, close everything, and
// hold no GPU memory afterwards.
//
// The package holds what both variants share: the Plan every rank
// agrees on (which rank dies, after how many iterations, where it records
// the moment it dies), the loop that runs a step until it fails, and the
// survivors' Outcome (the time from the kill to each survivor's error).
// The tests are the variants:
//
//   - TestBootstrapRankKill (tag mpi, CPU only, run by scripts/test-mpi.sh):
//     a loop of bootstrap AllGathers; the survivors' error names the
//     dead rank (a *team.MissingRanksError) within the bootstrap deadline.
//   - TestGPURankKill (tags gpu and mpi): a unicast team running checked
//     all-reduces through package collectives; the survivors' device-side
//     timeout becomes the collective's error (a *collectives.TimeoutError
//     naming the survivor), the team is broken, Close frees everything,
//     and cuMemGetInfo is back at its value from before the team once
//     every survivor has closed (they meet through files: Plan.Meet).
//   - TestSimRankKill (tag mpi, no MPI needed): the same loop on the
//     simulated node, the ranks goroutines of one process and the victim
//     a goroutine that stops and closes its team, as the driver cleans up
//     after a dead process; it runs in the plain run of the test binary.
//   - TestGPUGraphRankKill and TestSimRankKill/graph: each iteration
//     replays a graph of all-reduces; the victim dies with its replay
//     launched. Both kill variants count the driver objects a survivor
//     still holds after Close (at the calls: countDriver), its
//     descriptors (GPU), and read cuMemGetInfo after a clean warm-up
//     cycle, so that the driver's lazy per-context growth is not taken
//     for a leak (run 19's 8 MiB, see killSetup.warm).
//   - TestGPUCloseInFlight and TestSimCloseInFlight: Close right after
//     eager all-reduces and a graph replay, without Sync, with and without
//     a straggler: Close returns nil in time and nothing is held.
//   - TestGPUSoakMPI and TestSimSoak: the six collectives at random
//     (type, operator, size, root, in or out of place, eager or graph
//     replays), every result checked bit for bit (soak_test.go).
//
// # mpirun and a dying rank
//
// By default OpenMPI's mpirun (4.1) ends the whole job as soon as one
// process dies, so the survivors would be killed before they could show
// anything. With --enable-recovery it lets them run on (it prints a
// "PMIX ERROR: BAD-PARAM" line when the process dies, which is harmless).
// mpirun's own exit status is then 0 even though a rank was killed, and
// it says nothing of the survivors' results: each survivor's TestMain
// prints one line, "rankkill: rank R: PASS" or "... FAIL", and the
// script counts them (scripts/test-mpi.sh). After the kill the survivors
// cannot meet through MPI any more (every collective includes the dead
// rank), so they share what they must through files (Plan.Dir); they
// still finalize MPI, which under --enable-recovery returns without the
// dead rank (OpenMPI 4.1.4, tried here).
//
//	CGO_ENABLED=1 go test -c -tags mpi -o rankkill.test ./team/mpi/rankkill
//	mpirun --allow-run-as-root --oversubscribe --enable-recovery -np 4 ./rankkill.test -test.run BootstrapRankKill
package rankkill
