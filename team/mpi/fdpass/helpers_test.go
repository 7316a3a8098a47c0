//go:build linux

package fdpass

import (
	"crypto/rand"
	"errors"
	"io"
	"log/slog"
	"os"
	"syscall"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/nvls-go/nvls/team/mpi/internal/fdtest"
)

func newLogger() (*slog.Logger, *fdtest.LogBuf) {
	lb := &fdtest.LogBuf{}
	return slog.New(slog.NewTextHandler(lb, &slog.HandlerOptions{Level: slog.LevelDebug})), lb
}

func randBytes(t testing.TB, n int) []byte {
	t.Helper()
	b := make([]byte, n)
	_, err := rand.Read(b)
	require.NoError(t, err)
	return b
}

// newJob starts n servers sharing one token, as the n ranks of a job.
func newJob(t *testing.T, n int, cfg Config) ([]*Server, []string, *fdtest.LogBuf) {
	t.Helper()
	tok, err := NewToken()
	require.NoError(t, err)
	log, lb := newLogger()
	srvs := make([]*Server, n)
	paths := make([]string, n)
	for r := range n {
		c := cfg
		c.Token, c.Rank, c.Size, c.Logger = tok, r, n, log
		if c.Parent == "" {
			c.Parent = t.TempDir()
		}
		s, err := Listen(c)
		require.NoError(t, err)
		t.Cleanup(func() { s.Close() })
		srvs[r], paths[r] = s, s.Path()
	}
	return srvs, paths, lb
}

// leakProbe is a pipe whose write end w is passed as a descriptor: once
// the local copy is closed, the read end sees EOF only when every copy of
// w is closed, in this process or any other, or in flight in a socket.
type leakProbe struct {
	r *os.File
	w int
}

func newLeakProbe() (*leakProbe, error) {
	var p [2]int
	if err := syscall.Pipe2(p[:], syscall.O_CLOEXEC|syscall.O_NONBLOCK); err != nil {
		return nil, err
	}
	return &leakProbe{r: os.NewFile(uintptr(p[0]), "probe"), w: p[1]}, nil
}

// closedEverywhere closes the local copy of w (once) and reports whether
// every other copy is closed within d.
func (p *leakProbe) closedEverywhere(d time.Duration) bool {
	if p.w >= 0 {
		syscall.Close(p.w)
		p.w = -1
	}
	defer p.r.Close()
	p.r.SetReadDeadline(time.Now().Add(d))
	var b [1]byte
	_, err := p.r.Read(b[:])
	return errors.Is(err, io.EOF)
}
