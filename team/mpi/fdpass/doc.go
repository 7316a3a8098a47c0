//go:build linux

// Package fdpass passes open file descriptors between the processes of one
// job on one node, over Unix domain sockets with SCM_RIGHTS. It is how the
// ranks of a one-process-per-GPU team exchange the POSIX file descriptors
// that the CUDA driver exports for allocations and multicast objects.
//
// Every rank runs a Server: a socket in a directory that only the job's
// user can open (mode 0700, created fresh under $XDG_RUNTIME_DIR or
// os.TempDir, unique per job and rank). A peer pushes a descriptor to it
// with Send. Before the server accepts anything on a connection it checks:
//
//   - the peer's credentials (SO_PEERCRED): same uid as this process;
//   - a hello message carrying the job's random token (TokenSize bytes from
//     crypto/rand, which rank 0 hands to the others through the bootstrap)
//     and a sender rank, receiver rank and sequence number that make sense.
//
// Anything else is refused: the server answers with the reason, logs it
// (log/slog, level WARN, with the peer's pid and uid) and closes the
// connection; descriptors are only taken after the hello passed. The
// client checks the server's credentials the same way before it sends a
// descriptor. Two caps bound what peers can make the server hold
// (Config.MaxConns, Config.MaxEarly): connections at once, and each
// sender's descriptors for exchanges no Collect waits for yet; what is
// over a cap is refused the same way, and a descriptor already received
// is closed.
//
// Every step has a deadline: the client's from its context, the server's
// per connection from Config.HandshakeTimeout, Collect's from its context.
//
// Ownership: a descriptor returned by Collect or Exchange belongs to the
// caller, who closes it once it is imported (the team closes them right
// after cuMemImportFromShareableHandle). Descriptors that arrived but were
// never collected are closed by the server. Close removes the socket and
// its directory.
//
// Linux only (SO_PEERCRED), as are the driver's POSIX FD handles it carries.
package fdpass
