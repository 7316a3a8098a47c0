//go:build gpu

package team_test

import (
	"bytes"
	"context"
	"encoding/binary"
	"math"
	"math/rand/v2"
	"sync"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/nvls-go/nvls/cuda"
	"github.com/nvls-go/nvls/kernels"
	"github.com/nvls-go/nvls/team"
)

// TestGPUTypedCopies: CopyIn and CopyOut of every element type, from
// goroutines that are not the ranks' workers, on real GPUs; the device's
// bytes are read back the old way (cuda.CopyDtoH on the rank's worker)
// and compared with the little-endian encoding of fresh random values.
//
//	./.devbin/team.test -test.v -test.run GPUTypedCopies
func TestGPUTypedCopies(t *testing.T) {
	d, devs := gpus(t, 1, 8)
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	tm, err := team.New(ctx, d, devs, append(sharing(devs), team.WithTransport(team.Unicast),
		team.WithWorkspaceSize(8<<20), team.WithLogger(logger()))...)
	require.NoError(t, err)
	defer func() { require.NoError(t, tm.Close()) }()
	const n = 1<<18 + 3 // elements: an odd tail
	b, err := tm.Alloc(n * 8)
	require.NoError(t, err)
	rng := rand.New(rand.NewPCG(rand.Uint64(), rand.Uint64()))
	le := binary.LittleEndian
	gpuRoundTrip(t, d, tm, b, n, func(x uint64) float32 { return float32(int32(x)) / 7 }, func(b []byte, v float32) []byte { return le.AppendUint32(b, math.Float32bits(v)) }, rng)
	gpuRoundTrip(t, d, tm, b, n, func(x uint64) int32 { return int32(x) }, func(b []byte, v int32) []byte { return le.AppendUint32(b, uint32(v)) }, rng)
	gpuRoundTrip(t, d, tm, b, n, func(x uint64) uint32 { return uint32(x) }, func(b []byte, v uint32) []byte { return le.AppendUint32(b, v) }, rng)
	gpuRoundTrip(t, d, tm, b, n, func(x uint64) uint64 { return x }, func(b []byte, v uint64) []byte { return le.AppendUint64(b, v) }, rng)
	gpuRoundTrip(t, d, tm, b, n, func(x uint64) kernels.Float16 { return kernels.Float16(x) }, func(b []byte, v kernels.Float16) []byte { return le.AppendUint16(b, uint16(v)) }, rng)
	gpuRoundTrip(t, d, tm, b, n, func(x uint64) kernels.BFloat16 { return kernels.BFloat16(x) }, func(b []byte, v kernels.BFloat16) []byte { return le.AppendUint16(b, uint16(v)) }, rng)
}

// gpuRoundTrip copies n fresh values of one type (gen of random bits) into
// every rank's copy of b, concurrently, checks the device's bytes, and
// reads them back with CopyOut.
func gpuRoundTrip[T kernels.Elem](t *testing.T, d cuda.Driver, tm *team.Team, b team.Buffer, n int,
	gen func(uint64) T, enc func([]byte, T) []byte, rng *rand.Rand) {
	t.Helper()
	in := make([][]T, tm.NumLocal())
	want := make([][]byte, tm.NumLocal())
	for l := range in {
		in[l] = make([]T, n)
		for i := range in[l] {
			in[l][i] = gen(rng.Uint64())
			want[l] = enc(want[l], in[l][i])
		}
	}
	var wg sync.WaitGroup
	errs := make([]error, tm.NumLocal())
	for l := range in {
		wg.Go(func() { errs[l] = team.CopyIn(b, l, in[l]) })
	}
	wg.Wait()
	got := make([][]byte, tm.NumLocal())
	require.NoError(t, tm.Run(team.JobFunc(func(l int) error {
		require.NoError(t, errs[l])
		got[l] = make([]byte, len(want[l]))
		return cuda.CopyDtoH(d, got[l], b.Ptr(l))
	})))
	for l := range got {
		assert.True(t, bytes.Equal(want[l], got[l]), "%T rank %d: device bytes differ", in[l][0], tm.Rank(l))
		out := make([]T, n)
		require.NoError(t, team.CopyOut(out, b, l))
		var back []byte
		for _, v := range out {
			back = enc(back, v)
		}
		assert.True(t, bytes.Equal(want[l], back), "%T rank %d: CopyOut differs", in[l][0], tm.Rank(l))
	}
}
