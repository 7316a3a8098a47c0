// Package grow is the growth experiment of issue 7: it grows a device
// buffer from a start size to a target size, in fixed steps and by
// doubling, three ways, and reports the time per step, the total time and
// the peak device memory of each:
//
//   - growable: vmm.Growable, which maps new physical chunks at the end of
//     a reserved virtual range (no copy);
//   - realloc: cuMemAlloc of the new size, a device-to-device copy of the
//     old contents, cuMemFree of the old buffer;
//   - managed: one cuMemAllocManaged of the target size, with each step
//     prefetching the added part to the device (cuMemPrefetchAsync).
//
// Before each grow a fresh random pattern is written into the first and
// the last chunk of the buffer, and after the grow it is read back and
// compared: a mismatch is an error, for every method.
//
// Run acts in the current context: the caller locks its goroutine to the
// OS thread (runtime.LockOSThread) and makes dev's primary context current
// before calling it. The nvls-grow command (bench/nvls-grow) calls Run;
// Result renders as a table (WriteTable, WriteSteps) and a plot (Plot).
package grow
