//go:build linux

// Package sock is a team.Bootstrap for ranks that meet through a unique
// id, as NCCL's ranks do: no MPI, one process per GPU (or one thread per
// GPU in one process), all on one host.
//
// NewID starts a rendezvous in the calling process (a Unix socket in the
// abstract namespace) and returns the ID that names it: the socket's
// name, a random job token and the maker's pid, in NCCL's 128 bytes.
// Every rank calls Join with the ID, the rank count and its rank; the
// rendezvous checks each caller (same uid, the token, a rank in range and
// not taken, the same rank count), and once every rank has come it sends
// each the others' descriptor-passing sockets (package fdpass, as
// team/mpi uses) and closes its listener: an ID serves one job. From then
// on it relays AllGather and Barrier between the ranks (a star), and
// AllGatherFDs passes descriptors directly with fdpass.
//
// Nothing blocks past a deadline: Join and every collective take theirs
// from the context (or DefaultTimeout), and the rendezvous gives up on
// ranks that have not come within its timeout of the first one, naming
// them. An ID that is not one of NewID's is ErrBadID at once; one whose
// rendezvous is gone (its process exited, or its job already started) is
// ErrStaleID at once; one with a wrong token is refused (ErrRefused).
package sock
