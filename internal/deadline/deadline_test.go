package deadline

import (
	"context"
	"errors"
	"fmt"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestOwnDeadline: an error of a context WithTimeout ended names that
// deadline, once, and still matches context.DeadlineExceeded; the
// context's cause names it too.
func TestOwnDeadline(t *testing.T) {
	ctx, cancel := WithTimeout(context.Background(), time.Nanosecond, "setup deadline", "NVLS_SETUP_TIMEOUT=1ns")
	defer cancel()
	<-ctx.Done()
	err := Explain(ctx, fmt.Errorf("bootstrap: AllGather #0: %w", ctx.Err()))
	require.ErrorIs(t, err, context.DeadlineExceeded)
	assert.EqualError(t, err, "bootstrap: AllGather #0: context deadline exceeded (setup deadline NVLS_SETUP_TIMEOUT=1ns)")
	assert.Equal(t, err, Explain(ctx, err), "said once")
	cause := context.Cause(ctx)
	assert.ErrorIs(t, cause, context.DeadlineExceeded)
	assert.EqualError(t, cause, "context deadline exceeded (setup deadline NVLS_SETUP_TIMEOUT=1ns)")
	wrapped := fmt.Errorf("x: %w", cause)
	assert.Equal(t, wrapped, Explain(ctx, wrapped), "the cause says it already")
}

// TestCallersDeadline: where the caller's context ends first, the error
// says so, not the deadline WithTimeout set; with no deadline of ours,
// just the caller's.
func TestCallersDeadline(t *testing.T) {
	parent, pcancel := context.WithTimeout(context.Background(), time.Nanosecond)
	defer pcancel()
	ctx, cancel := WithTimeout(parent, time.Minute, "setup deadline", "NVLS_SETUP_TIMEOUT=1m")
	defer cancel()
	<-ctx.Done()
	err := Explain(ctx, ctx.Err())
	require.ErrorIs(t, err, context.DeadlineExceeded)
	assert.EqualError(t, err, "context deadline exceeded (the caller's context deadline, earlier than the setup deadline of 1m0s)")

	inner, icancel := context.WithCancel(parent)
	defer icancel()
	assert.EqualError(t, Explain(inner, context.DeadlineExceeded), "context deadline exceeded (the caller's context deadline)")
}

// TestLeftAlone: nil, other errors, and contexts without a deadline.
func TestLeftAlone(t *testing.T) {
	ctx, cancel := WithTimeout(context.Background(), time.Nanosecond, "setup deadline", "X=1ns")
	defer cancel()
	<-ctx.Done()
	assert.NoError(t, Explain(ctx, nil))
	other := errors.New("driver failed")
	assert.Equal(t, other, Explain(ctx, other))
	canceled := fmt.Errorf("w: %w", context.Canceled)
	assert.Equal(t, canceled, Explain(ctx, canceled))
	assert.Equal(t, context.DeadlineExceeded, Explain(context.Background(), context.DeadlineExceeded))
}
