// Command nvls-bench measures nvls's collectives the way nccl-tests
// measures NCCL's, and can run NCCL on the same buffers in the same run.
//
// It sweeps message sizes from -b to -e (multiplying by -f), and for each
// size runs the collective out of place and in place: -w warm-up
// iterations, then -n timed ones of -m collectives each, timed with CUDA
// events on every rank's stream; -a says whose time is reported (default:
// the slowest rank's). The table has nccl-tests' columns and
// bus-bandwidth factors (all-reduce 2(n-1)/n, broadcast 1), so its numbers
// compare one to one with all_reduce_perf's and broadcast_perf's. With -c N
// (default 1) every size is also checked N times: fresh random inputs,
// poisoned outputs, one collective, and every rank's output compared with
// a reference computed on the host; #wrong counts the elements that differ
// (beyond a tolerance set by the type and the rank count for
// floating-point sums; exact otherwise). nvls-bench -h lists the flags;
// nccl-tests' own keep their meaning, and those that cannot apply are
// refused saying why.
//
// Without a CUDA driver on the machine nvls-bench runs the simulated node
// and says so in its header (simulated times are not hardware times);
// -compare nccl then runs nvls alone and the header says why. Where the
// loaded NCCL has symmetric kernels for the run, -compare nccl adds a
// column of NCCL on its symmetric memory (symmetric.go). -ranks N runs N
// ranks on fewer GPUs (team.WithSharedDevices; never without the flag),
// and -roofline (on with shared GPUs) gives every row's bandwidth as a
// fraction of the GPUs' copy roofline (roofline.go; docs/bench.md).
//
// The code: colls.go is the table of collectives (a new collective is an
// entry: its name, bus-bandwidth factor, how nvls and NCCL run it, what
// its output must be); world.go the two worlds a run lives in, one process
// driving every GPU (solo) or one process per GPU (perRank, perrank.go);
// node.go opens the GPUs; sweep.go, timing.go and check.go measure and
// check; header.go, table.go, report.go and plot.go report. The VMM growth
// experiment is its own command, bench/nvls-grow.
//
// Built with -tags mpi (cgo, against OpenMPI: make bench-mpi, which makes
// bin/nvls-bench-mpi) and started by mpirun, every process is one rank and
// drives the GPU of its local rank; rank 0 prints the one table and writes
// -json and -plot (-g, if given, must be the number of ranks):
//
//	mpirun --allow-run-as-root -np 4 bin/nvls-bench-mpi -transport unicast -b 8 -e 128M
//
// Exit status: 0 when every check passed, 1 when a run failed or a
// result was wrong, 2 for bad flags.
package main
