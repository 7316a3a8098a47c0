// Package peercheck checks a unicast team of one-rank processes end to
// end: every rank writes a distinct pattern into a symmetric buffer and a
// stamp into every peer's buffer through its peer mapping; every rank then
// reads every peer's pattern through the peer mappings and finds every
// peer's stamp in its own buffer. The patterns and stamps come from a seed
// that every rank shares, so each rank computes what every other rank
// wrote on its own. It is what team/mpi's example and GPU test run, and
// its own test runs it on the simulated node.
package peercheck
