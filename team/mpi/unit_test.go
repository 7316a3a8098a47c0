//go:build mpi

package mpi

import (
	"context"
	"crypto/rand"
	"io"
	"log/slog"
	"testing"
	"time"

	"github.com/nvls-go/nvls/cuda"
	"github.com/nvls-go/nvls/cuda/sim"
	"github.com/nvls-go/nvls/team"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func newLogger(w io.Writer) *slog.Logger {
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{Level: slog.LevelDebug}))
}

// srvToken is the job token this rank's server checks.
func (b *Bootstrap) srvToken() []byte { return b.token }

func TestPartsRoundTrip(t *testing.T) {
	for n := 1; n < 9; n++ {
		parts := make([][]byte, n)
		for i := range parts {
			parts[i] = make([]byte, (i*37)%200)
			_, err := rand.Read(parts[i])
			require.NoError(t, err)
		}
		got, err := decodeParts(encodeParts(parts), n)
		require.NoError(t, err)
		require.Len(t, got, n)
		for i := range parts {
			assert.Equal(t, parts[i], got[i])
			assert.NotNil(t, got[i])
		}
		_, err = decodeParts(encodeParts(parts), n+1)
		assert.Error(t, err)
		enc := encodeParts(parts)
		_, err = decodeParts(append(enc, 0), n)
		assert.Error(t, err, "trailing bytes")
		if len(enc) > 2 {
			_, err = decodeParts(enc[:len(enc)-1], n)
			assert.Error(t, err, "cut short")
		}
	}
}

func TestFrameAndRanks(t *testing.T) {
	p := make([]byte, 50)
	_, err := rand.Read(p)
	require.NoError(t, err)
	k, op, got, err := unframe(frame(kindData, "AllGather", p))
	require.NoError(t, err)
	assert.Equal(t, kindData, k)
	assert.Equal(t, "AllGather", op)
	assert.Equal(t, p, got)
	k, op, got, err = unframe(frame(kindResult, "Barrier", nil))
	require.NoError(t, err)
	assert.Equal(t, kindResult, k)
	assert.Equal(t, "Barrier", op)
	assert.Empty(t, got)
	_, _, _, err = unframe([]byte{1})
	assert.Error(t, err)
	_, _, _, err = unframe([]byte{1, 5, 'a'})
	assert.Error(t, err)

	ranks := []int{3, 0, 700, 65}
	dec, rest, err := decodeRanks(append(encodeRanks(ranks), "why"...))
	require.NoError(t, err)
	assert.Equal(t, ranks, dec)
	assert.Equal(t, "why", string(rest))
	_, _, err = decodeRanks([]byte{5, 1})
	assert.Error(t, err)
}

func TestGuard(t *testing.T) {
	b := make([]byte, guard)
	fillGuard(b, 0xA5)
	assert.True(t, checkGuard(b, 0xA5))
	assert.False(t, checkGuard(b, 0x5A))
	b[guard-1]++
	assert.False(t, checkGuard(b, 0xA5))
}

func TestDevice(t *testing.T) {
	n := sim.New(sim.Config{Devices: 3})
	defer n.Close()
	require.NoError(t, n.Init())
	for lr := range 3 {
		d, err := Device(n, lr)
		require.NoError(t, err)
		assert.Equal(t, cuda.Device(lr), d)
	}
	_, err := Device(n, 3)
	assert.ErrorIs(t, err, ErrNoDevice)
	assert.ErrorContains(t, err, "local rank 3, but 3 device(s) visible")
	_, err = Device(n, -1)
	assert.ErrorIs(t, err, ErrNoDevice)
}

func TestLocalRankFromEnv(t *testing.T) {
	t.Setenv("OMPI_COMM_WORLD_LOCAL_RANK", "")
	t.Setenv("MPI_LOCALRANKID", "")
	t.Setenv("SLURM_LOCALID", "5")
	r, from, ok := LocalRankFromEnv()
	assert.True(t, ok)
	assert.Equal(t, 5, r)
	assert.Equal(t, "SLURM_LOCALID", from)
	t.Setenv("OMPI_COMM_WORLD_LOCAL_RANK", "2")
	r, from, ok = LocalRankFromEnv()
	assert.True(t, ok)
	assert.Equal(t, 2, r)
	assert.Equal(t, "OMPI_COMM_WORLD_LOCAL_RANK", from)
	t.Setenv("OMPI_COMM_WORLD_LOCAL_RANK", "x")
	t.Setenv("SLURM_LOCALID", "")
	_, _, ok = LocalRankFromEnv()
	assert.False(t, ok)
}

func TestStaleHello(t *testing.T) {
	assert.True(t, staleHello(helloOp(3), helloOp(4)))
	assert.True(t, staleHello(helloOp(9), helloOp(10)))
	assert.False(t, staleHello(helloOp(4), helloOp(4)))
	assert.False(t, staleHello(helloOp(5), helloOp(4)))
	assert.False(t, staleHello("AllGather", helloOp(4)))
	assert.False(t, staleHello(helloOp(1), "Barrier"))
}

func TestSetupTimeoutFromEnv(t *testing.T) {
	for _, c := range []struct {
		v    string
		want time.Duration
		ok   bool
		bad  bool
	}{
		{"", 0, false, false},
		{"  ", 0, false, false},
		{"90", 90 * time.Second, true, false},
		{"2m", 2 * time.Minute, true, false},
		{" 750ms ", 750 * time.Millisecond, true, false},
		{"0", 0, false, true},
		{"-5", 0, false, true},
		{"0s", 0, false, true},
		{"1.5", 1500 * time.Millisecond, true, false},
		{"soon", 0, false, true},
		{"99999999999999999999", 0, false, true},
	} {
		t.Setenv(EnvSetupTimeout, c.v)
		d, ok, err := setupTimeoutFromEnv()
		if c.bad {
			var ee *team.EnvError
			require.ErrorAs(t, err, &ee, "%q", c.v)
			assert.Equal(t, EnvSetupTimeout, ee.Var)
			assert.ErrorIs(t, err, team.ErrBadEnv)
			assert.ErrorContains(t, err, "NVLS_SETUP_TIMEOUT")
			continue
		}
		require.NoError(t, err, "%q", c.v)
		assert.Equal(t, c.ok, ok, "%q", c.v)
		assert.Equal(t, c.want, d, "%q", c.v)
	}
}

// New refuses a bad NVLS_SETUP_TIMEOUT, even with WithTimeout, before it
// touches MPI.
func TestNewBadSetupTimeout(t *testing.T) {
	t.Setenv(EnvSetupTimeout, "forever")
	proc.mu.Lock()
	open := proc.open
	proc.mu.Unlock()
	for _, opts := range [][]Option{nil, {WithTimeout(time.Second)}} {
		b, err := New(context.Background(), opts...)
		assert.Nil(t, b)
		assert.ErrorIs(t, err, team.ErrBadEnv)
	}
	proc.mu.Lock()
	defer proc.mu.Unlock()
	assert.Equal(t, open, proc.open, "no Bootstrap counted open")
}
