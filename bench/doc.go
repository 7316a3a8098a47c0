// Command nvls-bench measures nvls's collectives the way nccl-tests
// measures NCCL's, and can run NCCL on the same buffers in the same run.
//
// It sweeps message sizes from -b to -e (multiplying by -f), and for each
// size runs the collective out of place and in place: -w warm-up
// iterations, then -n timed ones, timed with CUDA events on every rank's
// stream; the reported time is the slowest rank's. The table has
// nccl-tests' columns and bus-bandwidth factors (all-reduce 2(n-1)/n,
// broadcast 1), so its numbers compare one to one with all_reduce_perf's
// and broadcast_perf's. With -c 1 (the default) every size is also checked:
// fresh random inputs, poisoned outputs, one collective, and every rank's
// output compared with a reference computed on the host; #wrong counts the
// elements that differ (beyond a tolerance set by the type and the rank
// count for floating-point sums; exact otherwise).
//
// Usage:
//
//	nvls-bench [flags]
//
// The flags nccl-tests has, with the same meaning:
//
//	-b minbytes   smallest size (default 8; suffixes K, M, G: powers of 1024)
//	-e maxbytes   largest size (default 128M, nccl-tests' usual -e; on the
//	              simulated node 1M unless given)
//	-f factor     size step factor (default 2)
//	-n iters      timed iterations per size (default 20)
//	-w iters      warm-up iterations per size (default 5)
//	-c 0|1        check results (default 1)
//	-g gpus       GPUs to use (default: all; the simulated node has 4)
//	-d type       float|half|bfloat16|int32|uint32|uint64
//	              (also f32|f16|bf16|s32|u32|u64, float32, float16, int)
//	-o op         sum|min|max (all-reduce)
//	-r root       broadcast root (default 0)
//
// And nvls-bench's own:
//
//	-coll c       allreduce|broadcast|barrier|grow (default allreduce)
//	-transport t  auto|multicast|unicast (default auto)
//	-graph        capture the -n iterations into one CUDA graph per GPU and
//	              time one replay (nccl-tests -G 1); NCCL is captured the same way
//	-compare nccl run NCCL (libnccl.so.2) on the same buffers too, and
//	              print its time, its busbw and the ratio NCCL time / ours
//	              (> 1: nvls is faster)
//	-timing m     avg (nccl-tests' way: total over -n iterations / n) or
//	              median (of per-iteration event timings)
//	-json FILE    write every figure as JSON
//	-plot FILE    busbw and time against size, SVG or PNG by extension
//	-sim          run on the simulated NVSwitch node (cuda/sim)
//	-timeout d    limit for any one wait: team setup, one size's runs, a
//	              stream to drain (default 2m)
//
// Without a CUDA driver on the machine nvls-bench runs the simulated node
// and says so in its header: simulated times are not hardware times.
//
// -coll grow runs the VMM growth experiment of package bench/grow
// (Growable against cuMemAlloc+copy and managed memory) on one GPU.
//
// # One process per GPU (mpirun)
//
// Built with -tags mpi (cgo, against OpenMPI: make bench-mpi, which makes
// bin/nvls-bench-mpi) and started by mpirun, every process is one rank and
// drives the GPU of its local rank; the ranks meet through team/mpi's
// bootstrap and run the same sweep with the same flags (-g, if given, must
// be the number of ranks). Each rank times its own stream; rank 0 prints
// one table whose times are the slowest rank's (as nccl-tests does under
// MPI), #wrong summed over the ranks, and writes -json and -plot. -compare
// nccl passes rank 0's ncclGetUniqueId to every rank through the bootstrap
// and calls ncclCommInitRank. Without mpirun the same binary is the
// single-process nvls-bench. A rank that fails a step every rank takes
// (opening its GPU, the team, NCCL) stops every rank, naming it; a rank
// that fails during the sweep leaves the others waiting until -timeout,
// after which they name it too.
//
//	mpirun --allow-run-as-root -np 4 bin/nvls-bench-mpi -transport unicast -b 8 -e 128M
//
// Exit status: 0 when every check passed, 1 when a run failed or a
// result was wrong, 2 for bad flags.
package main
