package vmm

import (
	"bytes"
	"context"
	"log/slog"
	"testing"

	"github.com/stretchr/testify/assert"
)

// TestLoggerLevel: NVLS_DEBUG is read as package team reads it (WARN,
// INFO, TRACE, any case; blank is unset); a value that is not understood
// leaves WARN and says so, naming the variable and what it accepts.
func TestLoggerLevel(t *testing.T) {
	for _, c := range []struct {
		value       string
		info, debug bool
	}{{"", false, false}, {"warn", false, false}, {" INFO ", true, false}, {"Trace", true, true}, {"DEBUG", false, false}} {
		var buf bytes.Buffer
		l := newLogger(&buf, func(string) (string, bool) { return c.value, true })
		ctx := context.Background()
		assert.Equal(t, c.info, l.Enabled(ctx, slog.LevelInfo), "%q: INFO", c.value)
		assert.Equal(t, c.debug, l.Enabled(ctx, slog.LevelDebug), "%q: TRACE (DEBUG here)", c.value)
		if c.value == "DEBUG" {
			assert.Contains(t, buf.String(), `NVLS_DEBUG=\"DEBUG\": want one of WARN, INFO, TRACE`)
		} else {
			assert.Empty(t, buf.String())
		}
	}
}
