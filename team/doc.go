// Package team brings up a team of GPUs for the collectives: one rank per
// GPU, each with a symmetric workspace that every rank maps (unicast) and,
// where the NVSwitch fabric serves it, bound to one multicast object.
//
// New brings up every GPU from one process, one worker per rank (a
// goroutine locked to an OS thread with the device's context current);
// NewRank brings up one rank of a team whose ranks are processes
// (team/mpi). The bring-up is a table of steps (bringup.go) that every
// rank runs, each step ending in an exchange through the Bootstrap, so
// that every rank stops, goes on or falls back to unicast at the same
// step; what a step acquires pushes its undo, and teardown runs those
// stacks backwards. Errors name the step, the rank and the device.
//
//	tm, err := team.New(ctx, drv, []cuda.Device{0, 1, 2, 3})
//	...
//	defer tm.Close()
//	buf, err := tm.Alloc(1 << 20)   // the same offset on every rank
//	err = team.CopyIn(buf, 0, data) // []float32 to rank 0's copy, from any goroutine
//	err = tm.Run(job)               // job.Run(localRank) on every worker
//
// The transport is multicast where every device supports it and nothing
// turns it off (NCCL_NVLS_ENABLE=0 always does), else unicast;
// WithTransport and NVLS_TRANSPORT ask for one. NVLS_DEBUG=INFO logs a
// line per step, TRACE every driver call; NVLS_SETUP_TIMEOUT bounds the
// bring-up.
//
// docs/team.md says the rest (the fallback when the fabric is not ready,
// deadlines, shared devices, contexts and threads, the broken state);
// docs/bringup.md walks through the bring-up in the code.
package team
