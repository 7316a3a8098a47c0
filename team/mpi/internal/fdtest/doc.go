// Package fdtest has test helpers for descriptor passing: memfd files that
// stand in for the POSIX file descriptors the CUDA driver exports, reading
// a file through a descriptor, and counting the open descriptors of the
// process (to catch leaks).
package fdtest
