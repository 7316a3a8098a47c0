package main

// busFactor is nccl-tests' bus-bandwidth factor for a collective over n
// ranks: busbw = algbw * factor, where algbw = size / time. It measures
// the bytes each rank's links carry, so that numbers from different rank
// counts compare against the link speed:
//
//	allreduce                      2(n-1)/n
//	reducescatter, allgather,      (n-1)/n
//	alltoall
//	broadcast, reduce, sendrecv    1
//
// (as all_reduce.cu, reduce_scatter.cu, all_gather.cu, broadcast.cu of
// nccl-tests compute it). A barrier moves no data: factor 0.
func busFactor(coll string, n int) float64 {
	if n <= 0 {
		return 0
	}
	switch coll {
	case "allreduce":
		return 2 * float64(n-1) / float64(n)
	case "reducescatter", "allgather", "alltoall":
		return float64(n-1) / float64(n)
	case "broadcast", "reduce", "sendrecv":
		return 1
	}
	return 0
}

// bandwidth returns algbw and busbw in GB/s (10^9 bytes per second, as
// nccl-tests) for size bytes moved in sec seconds over n ranks.
func bandwidth(coll string, size uint64, sec float64, n int) (algbw, busbw float64) {
	if sec <= 0 {
		return 0, 0
	}
	algbw = float64(size) / 1e9 / sec
	return algbw, algbw * busFactor(coll, n)
}
