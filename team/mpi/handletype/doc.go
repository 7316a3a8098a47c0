//go:build linux

// Package handletype decides how the processes of a job share driver handles
// (allocations, multicast objects): as POSIX file descriptors passed over
// Unix sockets (package fdpass; one node only), or as 64-byte fabric
// handles sent through the bootstrap's all-gather (the path that also
// works across the nodes of a multi-node NVLink domain).
//
// Fabric handles are used when, on every rank:
//
//   - the device reports CU_DEVICE_ATTRIBUTE_HANDLE_TYPE_FABRIC_SUPPORTED;
//   - an IMEX channel is usable: /proc/devices lists
//     nvidia-caps-imex-channels, and a channel node under
//     /dev/nvidia-caps-imex-channels (channel0 first) opens, with the
//     major number /proc/devices gives;
//   - a trial export works: one granule created with the fabric handle
//     type and exported as a fabric handle (no multicast call is made).
//
// Otherwise POSIX file descriptors are used, and the reason says why
// (which rank, which check). Check runs on one rank; Decide combines every
// rank's answer, the same way on every rank.
//
// Linux only, as are /proc/devices and the IMEX channel nodes.
package handletype
