package vmm

import (
	"log/slog"
	"os"
	"strings"
	"sync/atomic"
)

var logger atomic.Pointer[slog.Logger]

func init() { logger.Store(defaultLogger()) }

// defaultLogger writes to stderr at the level NVLS_DEBUG names (WARN,
// INFO or TRACE; WARN when unset).
func defaultLogger() *slog.Logger {
	lvl := slog.LevelWarn
	switch strings.ToUpper(strings.TrimSpace(os.Getenv("NVLS_DEBUG"))) {
	case "INFO":
		lvl = slog.LevelInfo
	case "TRACE", "DEBUG":
		lvl = slog.LevelDebug
	}
	return slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: lvl})).With("pkg", "vmm")
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
