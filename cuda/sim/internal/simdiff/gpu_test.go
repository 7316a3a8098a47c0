//go:build gpu

package simdiff

// The simulator against the real driver on one GPU. Build here, run on the
// GPU machine (it has no Go):
//
//	CGO_ENABLED=0 go test -c -tags gpu -o .devbin/simdiff.test ./cuda/sim/internal/simdiff
//	NCCL_NVLS_ENABLE=0 ./.devbin/simdiff.test -test.run GPU -test.v -diff.seed 1 -diff.seqs 300
//
// (or NVLS_DIFF_SEED / NVLS_DIFF_SEQS). The real driver is wrapped in
// internal/unicastonly: no cuMulticast* call can reach it, and the sequences
// make none. It prints the summary, the differences by call and results,
// and every difference (the first few of each class with the calls before
// it); each class of differences fails the test.

import (
	"flag"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/require"

	"github.com/nvls-go/nvls/cuda"
	"github.com/nvls-go/nvls/cuda/sim"
	"github.com/nvls-go/nvls/internal/unicastonly"
)

var (
	diffSeed = flag.Uint64("diff.seed", 0, "TestGPUDiff: seed (0: NVLS_DIFF_SEED, else the time)")
	diffSeqs = flag.Int("diff.seqs", 0, "TestGPUDiff: sequences (0: NVLS_DIFF_SEQS, else 300)")
	diffOnly = flag.String("diff.only", "", "TestGPUDiff: run only these sequences of the seed (comma-separated)")
	diffFor  = flag.Duration("diff.for", 100*time.Second, "TestGPUDiff: start no sequence after this long")
)

func envUint(t *testing.T, name string) uint64 {
	v := os.Getenv(name)
	if v == "" {
		return 0
	}
	n, err := strconv.ParseUint(v, 10, 64)
	require.NoError(t, err, "%s=%q", name, v)
	return n
}

func TestGPUDiff(t *testing.T) {
	lib, err := cuda.Load()
	if err != nil {
		t.Skipf("no usable CUDA driver: %v", err)
	}
	drv := unicastonly.Driver{Driver: lib, OnRefuse: func(op string) { t.Errorf("a multicast entry point was called: %s", op) }}
	dev, err := drv.DeviceGet(0)
	require.NoError(t, err)
	cfg, err := SimConfig(drv, dev)
	require.NoError(t, err)
	node := sim.New(cfg)
	defer node.Close()
	require.NoError(t, node.Init())

	seed := *diffSeed
	if seed == 0 {
		seed = envUint(t, "NVLS_DIFF_SEED")
	}
	if seed == 0 {
		seed = uint64(time.Now().UnixNano())
	}
	seqs := *diffSeqs
	if seqs == 0 {
		seqs = int(envUint(t, "NVLS_DIFF_SEQS"))
	}
	if seqs == 0 {
		seqs = 300
	}
	var only []int
	for _, f := range strings.Split(*diffOnly, ",") {
		if f = strings.TrimSpace(f); f != "" {
			k, err := strconv.Atoi(f)
			require.NoError(t, err, "-diff.only")
			only = append(only, k)
		}
	}
	img, err := Images()
	require.NoError(t, err)
	name, _ := drv.DeviceName(dev)
	t.Logf("simdiff: seed %d, %d sequences, device 0 (%s), simulator configured as %+v", seed, seqs, name, cfg)
	sum, err := Run(Config{Seed: seed, Sequences: seqs, Only: only, Budget: *diffFor, Images: img},
		Side{Name: "sim", D: node}, Side{Name: "cuda", D: drv, Dev: dev})
	require.NoError(t, err)
	sum.Report(os.Stdout)
	for _, c := range sum.Classes() {
		d := sum.Differences[c.Indexes[0]]
		t.Errorf("%d differences %s; the first: seed %d sequence %d call %d: %s: sim %s; cuda %s", len(c.Indexes), c.Key, d.Seed, d.Sequence, d.Call, d.Op, d.Results[0], d.Results[1])
	}
}
