package vmm

import (
	"io"
	"log/slog"
	"os"
	"sync/atomic"

	"github.com/nvls-go/nvls/internal/env"
)

var logger atomic.Pointer[slog.Logger]

func init() { logger.Store(defaultLogger()) }

// defaultLogger writes to stderr at the level NVLS_DEBUG names (WARN,
// INFO or TRACE; WARN when unset). A value that is not understood is
// reported once, in a WARN line (package team refuses it).
func defaultLogger() *slog.Logger { return newLogger(os.Stderr, env.OS) }

func newLogger(w io.Writer, src env.Source) *slog.Logger {
	lvl := slog.LevelWarn
	v, _, err := src.Enum(env.Debug, "WARN", "INFO", "TRACE")
	switch v {
	case "INFO":
		lvl = slog.LevelInfo
	case "TRACE":
		lvl = slog.LevelDebug
	}
	l := slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: lvl})).With("pkg", "vmm")
	if err != nil {
		l.Warn("vmm: logging at WARN", "err", err)
	}
	return l
}

// SetLogger replaces the logger this package writes to (nil restores the
// default: stderr, at the level NVLS_DEBUG names, WARN when unset). Setup
// facts such as whether compression was granted are logged at INFO.
func SetLogger(l *slog.Logger) {
	if l == nil {
		l = defaultLogger()
	}
	logger.Store(l)
}

func log() *slog.Logger { return logger.Load() }
