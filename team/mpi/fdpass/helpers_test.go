package fdpass

import (
	"bytes"
	"crypto/rand"
	"log/slog"
	"sync"
	"testing"

	"github.com/stretchr/testify/require"
)

// logBuf is a goroutine-safe log sink.
type logBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *logBuf) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *logBuf) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

func newLogger() (*slog.Logger, *logBuf) {
	lb := &logBuf{}
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
func newJob(t *testing.T, n int, cfg Config) ([]*Server, []string, *logBuf) {
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
