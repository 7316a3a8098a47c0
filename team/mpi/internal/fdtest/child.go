//go:build linux

package fdtest

import (
	"bytes"
	"io"
	"os"
	"path/filepath"
	"sync"
	"testing"
)

// LogBuf is a goroutine-safe log sink.
type LogBuf struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *LogBuf) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *LogBuf) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// CopyExecutable puts a copy of this test binary where any uid can run
// it (a directory of mode 0755, removed at the end of the test) and
// returns its path.
func CopyExecutable(tb testing.TB) string {
	tb.Helper()
	dir, err := os.MkdirTemp("", "nvls-child-")
	if err != nil {
		tb.Fatal(err)
	}
	tb.Cleanup(func() { os.RemoveAll(dir) })
	dst := filepath.Join(dir, "child")
	if err := os.Chmod(dir, 0o755); err != nil {
		tb.Fatal(err)
	}
	if err := copySelf(dst); err != nil {
		tb.Fatal(err)
	}
	return dst
}

// copySelf copies the running binary to dst, executable by all.
func copySelf(dst string) error {
	self, err := os.Executable()
	if err != nil {
		return err
	}
	in, err := os.Open(self)
	if err != nil {
		return err
	}
	defer in.Close()
	out, err := os.OpenFile(dst, os.O_CREATE|os.O_WRONLY, 0o755)
	if err != nil {
		return err
	}
	if _, err := io.Copy(out, in); err != nil {
		out.Close()
		return err
	}
	return out.Close()
}
