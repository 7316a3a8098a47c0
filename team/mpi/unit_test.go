//go:build mpi

package mpi

import (
	"crypto/rand"
	"io"
	"log/slog"
	"testing"

	"github.com/nvls-go/nvls/cuda"
	"github.com/nvls-go/nvls/cuda/sim"
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
