//go:build linux

package fdpass

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"os"
	"sync"
	"syscall"
	"time"
)

// Envelope addresses one descriptor: from which rank, to which rank, for
// which exchange.
type Envelope struct {
	From, To int
	Seq      uint64
}

// Send connects to the server at path and hands it fd (or no descriptor
// when fd < 0), presenting token. fd stays open and the caller's: the
// receiver gets its own copy. It checks that the server runs under this
// process's uid before sending anything. Without a deadline on ctx,
// DefaultTimeout applies. A refusal is an error matching ErrRefused that
// carries the server's reason.
func Send(ctx context.Context, path string, token []byte, env Envelope, fd int) error {
	if len(token) != TokenSize {
		return fmt.Errorf("fdpass: token is %d bytes, want %d", len(token), TokenSize)
	}
	if env.From < 0 || env.To < 0 || env.From > 1<<31 || env.To > 1<<31 {
		return fmt.Errorf("fdpass: envelope ranks %d -> %d out of range", env.From, env.To)
	}
	ctx, cancel := withDefaultDeadline(ctx)
	defer cancel()
	var d net.Dialer
	nc, err := d.DialContext(ctx, "unix", path)
	if err != nil {
		return fmt.Errorf("fdpass: dial: %w", err)
	}
	c := nc.(*net.UnixConn)
	defer c.Close()
	dl, _ := ctx.Deadline()
	c.SetDeadline(dl)
	// Closing the connection ends a blocked read or write when ctx is
	// cancelled before its deadline.
	stop := context.AfterFunc(ctx, func() { c.SetDeadline(time.Unix(1, 0)) })
	defer stop()

	cred, err := peerCred(c)
	if err != nil {
		return fmt.Errorf("fdpass: server credentials: %w", err)
	}
	if int(cred.Uid) != os.Getuid() {
		return fmt.Errorf("%w: server at %s runs as uid %d, not %d", ErrRefused, path, cred.Uid, os.Getuid())
	}
	h := hello{From: uint32(env.From), To: uint32(env.To), Seq: env.Seq, HasFD: fd >= 0}
	copy(h.Token[:], token)
	if _, err := c.Write(h.marshal()); err != nil {
		return ctxErr(ctx, fmt.Errorf("fdpass: hello: %w", err))
	}
	if err := readStatus(c); err != nil {
		return ctxErr(ctx, err)
	}
	var oob []byte
	if fd >= 0 {
		oob = syscall.UnixRights(fd)
	}
	if _, _, err := c.WriteMsgUnix([]byte{0}, oob, nil); err != nil {
		return ctxErr(ctx, fmt.Errorf("fdpass: sending descriptor: %w", err))
	}
	if err := readStatus(c); err != nil {
		return ctxErr(ctx, err)
	}
	return nil
}

// readStatus reads one server reply.
func readStatus(c *net.UnixConn) error {
	var st [2]byte
	if _, err := io.ReadFull(c, st[:1]); err != nil {
		return fmt.Errorf("fdpass: reading reply: %w", err)
	}
	switch st[0] {
	case statusOK:
		return nil
	case statusRefused:
		if _, err := io.ReadFull(c, st[1:2]); err != nil {
			return fmt.Errorf("%w (no reason given)", ErrRefused)
		}
		reason := make([]byte, st[1])
		if _, err := io.ReadFull(c, reason); err != nil {
			return fmt.Errorf("%w (reason cut short)", ErrRefused)
		}
		return fmt.Errorf("%w: %s", ErrRefused, reason)
	}
	return fmt.Errorf("fdpass: unexpected reply byte %#x", st[0])
}

// ctxErr makes a failure that happened because ctx ended say so.
func ctxErr(ctx context.Context, err error) error {
	if errors.Is(err, os.ErrDeadlineExceeded) {
		// The connection's deadline is ctx's: let ctx's timer catch up.
		select {
		case <-ctx.Done():
		case <-time.After(50 * time.Millisecond):
		}
	}
	if cerr := ctx.Err(); cerr != nil && !errors.Is(err, cerr) {
		return fmt.Errorf("%w (%w)", err, cerr)
	}
	return err
}

// Exchange gives fd to every other rank and gathers theirs: every rank of
// the job calls it with the same seq. paths[r] is rank r's Server.Path()
// (this rank's entry is not used). It returns, indexed by rank,
// descriptors the caller owns and must close: a duplicate of fd for this
// rank, the peers' for the others, -1 where a rank passed none (fd < 0).
// fd itself stays the caller's. On failure it closes whatever it had
// gathered and returns errors joined: a *PeerError for each rank it could
// not deliver to and a *MissingError naming the ranks it heard nothing
// from.
func (s *Server) Exchange(ctx context.Context, seq uint64, paths []string, fd int) ([]int, error) {
	if len(paths) != s.size {
		return nil, fmt.Errorf("fdpass: %d paths for %d ranks", len(paths), s.size)
	}
	own := -1
	if fd >= 0 {
		var err error
		if own, err = dupCloexec(fd); err != nil {
			return nil, fmt.Errorf("fdpass: descriptor %d: %w", fd, err)
		}
	}
	ctx, cancel := withDefaultDeadline(ctx)
	defer cancel()

	peers := make([]int, 0, s.size-1)
	for r := range s.size {
		if r != s.rank {
			peers = append(peers, r)
		}
	}
	sendErrs := make([]error, s.size)
	var wg sync.WaitGroup
	for _, r := range peers {
		wg.Go(func() {
			err := Send(ctx, paths[r], s.token, Envelope{From: s.rank, To: r, Seq: seq}, fd)
			if err != nil {
				sendErrs[r] = &PeerError{Rank: r, Err: err}
			}
		})
	}
	got, cerr := s.Collect(ctx, seq, peers)
	wg.Wait()
	err := errors.Join(append(sendErrs, cerr)...)
	if err != nil {
		if own >= 0 {
			syscall.Close(own)
		}
		for _, v := range got {
			if v >= 0 {
				syscall.Close(v)
			}
		}
		return nil, err
	}
	out := make([]int, s.size)
	for r, v := range got {
		out[r] = v
	}
	out[s.rank] = own
	return out, nil
}

func dupCloexec(fd int) (int, error) {
	r, _, errno := syscall.Syscall(syscall.SYS_FCNTL, uintptr(fd), syscall.F_DUPFD_CLOEXEC, 0)
	if errno != 0 {
		return -1, errno
	}
	return int(r), nil
}
