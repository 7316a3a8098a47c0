package main

import (
	"io"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/nvls-go/nvls/cuda"
	"github.com/nvls-go/nvls/cuda/sim"
	"github.com/nvls-go/nvls/internal/unicastonly"
)

func TestFlagErrorsSayWhatIsWrong(t *testing.T) {
	cases := []struct {
		args []string
		want string // the whole message, or a prefix ending in "..."
	}{
		{[]string{"-d", "float64"}, "-d float64: unknown dtype (allowed: float, half, bfloat16, int32, uint32, uint64, float32, f32, fp32, float16, f16, fp16, bf16, int, s32, i32, u32, u64)"},
		{[]string{"-o", "prod"}, "-o prod: unknown op (allowed: sum, min, max)"},
		{[]string{"-coll", "alltoall"}, "-coll alltoall: unknown collective (allowed: allreduce, broadcast, barrier, reducescatter, allgather, reduce)"},
		{[]string{"-coll", "grow"}, "-coll grow: the VMM growth experiment is its own command now: nvls-grow (go build -o bin/nvls-grow ./bench/nvls-grow)"},
		{[]string{"-transport", "nvlink"}, "-transport nvlink: unknown transport (allowed: auto, multicast, unicast)"},
		{[]string{"-timing", "mean"}, "-timing mean: unknown timing (allowed: avg, median)"},
		{[]string{"-segment", "0"}, "-segment 0: out of range (iterations a timed segment: an integer >= 1)"},
		{[]string{"-segment", "5"}, "-segment 5: segments are what -timing median takes the median of: give -timing median"},
		{[]string{"-timing", "median", "-segment", "3"}, "-segment 3: -n 20 is not a whole number of segments of 3 iterations"},
		{[]string{"-timing", "median", "-segment", "2", "-z", "1"}, "-segment 2: -z 1 times every collective on the host: it has no segments"},
		{[]string{"-compare", "rccl"}, "-compare rccl: unknown compare (allowed: nccl, none)"},
		{[]string{"-b", "12X"}, "-b 12X: not a size (want a byte count like 8, 64K, 128M, 4G)"},
		{[]string{"-e", "-5"}, "-e -5: not a size (want a byte count like 8, 64K, 128M, 4G)"},
		{[]string{"-f", "1"}, "-f 1: step factor must be an integer >= 2"},
		{[]string{"-n", "0"}, "-n 0: out of range (timed iterations: an integer >= 1)"},
		{[]string{"-n", "many"}, "-n many: not an integer (timed iterations: an integer >= 1)"},
		{[]string{"-w", "-1"}, "-w -1: out of range (warm-up iterations: an integer >= 0)"},
		{[]string{"-c", "-1"}, "-c -1: out of range (checked runs: 0 (no check) or more)"},
		{[]string{"-c", "yes"}, "-c yes: not an integer (checked runs: 0 (no check) or more)"},
		{[]string{"-g", "9"}, "-g 9: out of range (GPUs: 1 to 8)"},
		{[]string{"-g", "0"}, "-g 0: out of range (GPUs: 1 to 8)"},
		{[]string{"-r", "8"}, "-r 8: out of range (root rank: 0 to 7, below -g)"},
		{[]string{"-g", "2", "-r", "3", "-coll", "broadcast"}, "-r 3: root out of range (0 to 1 with -g 2)"},
		{[]string{"-plot", "out.pdf"}, "-plot out.pdf: unknown plot format (allowed: a file name ending in .svg or .png)"},
		{[]string{"-timeout", "soon"}, "-timeout soon: not a positive duration (e.g. 30s, 2m)"},
		{[]string{"-b", "1M", "-e", "1K"}, "-b 1048576, -e 1024: the smallest size is larger than the largest"},
		{[]string{"-coll", "broadcast", "-o", "max"}, "-o max: -coll broadcast takes no reduction op"},
		{[]string{"-coll", "barrier", "-d", "half"}, "-d half: -coll barrier moves no data: it takes no dtype"},
		{[]string{"-coll", "barrier", "-compare", "nccl"}, "-compare nccl: NCCL has no barrier to compare with"},
		{[]string{"-coll", "barrier", "-plot", "b.svg"}, "-plot b.svg: -coll barrier has no sizes to plot against (use -json)"},
		{[]string{"-grow-step", "1M"}, "-grow-step: unknown flag (run nvls-bench -h for the list)"},
		{[]string{"-bogus"}, "-bogus: unknown flag (run nvls-bench -h for the list)"},
		{[]string{"-ranks", "0"}, "-ranks 0: out of range (ranks: 1 to 8, spread over the GPUs (-g))"},
		{[]string{"-ranks", "9"}, "-ranks 9: out of range (ranks: 1 to 8, spread over the GPUs (-g))"},
		{[]string{"-g", "4", "-ranks", "2"}, "-ranks 2: fewer ranks than GPUs (-g 4): every GPU runs at least one rank (give -g 2, or leave -ranks out)"},
		{[]string{"-g", "1", "-ranks", "2", "-compare", "nccl"}, "-compare nccl: -ranks 2 on -g 1: ranks share GPUs, and " + noNCCLShared},
		{[]string{"-g", "2", "-ranks", "4", "-transport", "multicast"}, "-transport multicast: -ranks 4 on -g 2: ranks share GPUs, and a GPU joins a multicast object once: ranks that share GPUs are unicast"},
		{[]string{"-ranks", "3", "-r", "3", "-coll", "broadcast"}, "-r 3: root out of range (0 to 2 with -ranks 3)"},
		{[]string{"-g", "1", "-ranks", "3", "-r", "2", "-coll", "broadcast", "-o", "max"}, "-o max: -coll broadcast takes no reduction op"},
		{[]string{"-coll", "barrier", "-roofline"}, "-roofline true: -coll barrier moves no data: there is no bandwidth to compare with the copy roofline"},
		{[]string{"-roofline=maybe"}, "-roofline maybe: not a boolean"},
		{[]string{"-d"}, "-d: needs a value"},
		{[]string{"extra"}, `"extra": unexpected argument (flags only; run nvls-bench -h)`},
	}
	for _, c := range cases {
		t.Run(strings.Join(c.args, " "), func(t *testing.T) {
			_, err := parseFlags(c.args, io.Discard)
			require.Error(t, err)
			assert.Equal(t, c.want, err.Error())
			// And through run: exit status 2, the message on stderr.
			code, out, errOut := runBench(t, c.args...)
			assert.Equal(t, exitUsage, code)
			assert.Empty(t, out)
			assert.Equal(t, "nvls-bench: "+c.want+"\n", errOut)
		})
	}
}

func TestHelp(t *testing.T) {
	code, _, errOut := runBench(t, "-h")
	assert.Equal(t, exitOK, code)
	assert.Contains(t, errOut, "-compare nccl")
}

func TestFlagsAccepted(t *testing.T) {
	_, err := parseFlags(strings.Fields("-b 1K -e 4G -f 4 -n 7 -w 0 -c 0 -g 8 -d BF16 -o max -r 7 -coll broadcast -transport unicast -graph -compare nccl -json x.json -plot x.PNG -timing median -timeout 90s"), io.Discard)
	// -o with broadcast is refused; everything else parsed first.
	require.Error(t, err)
	cfg, err := parseFlags(strings.Fields("-b 1K -e 4G -f 4 -n 7 -w 0 -c 0 -g 8 -d BF16 -r 7 -coll broadcast -transport unicast -graph -compare nccl -json x.json -plot x.PNG -timing median -timeout 90s"), io.Discard)
	require.NoError(t, err)
	assert.Equal(t, uint64(1024), cfg.minBytes)
	assert.Equal(t, uint64(4<<30), cfg.maxBytes)
	assert.Equal(t, uint64(4), cfg.stepFactor)
	assert.Equal(t, 7, cfg.iters)
	assert.Equal(t, 0, cfg.warmup)
	assert.Equal(t, 0, cfg.checkIters)
	assert.Equal(t, 8, cfg.gpus)
	assert.Equal(t, "bfloat16", cfg.dtype.NCCLName())
	assert.Equal(t, 7, cfg.root)
	assert.Equal(t, collBroadcast, cfg.coll)
	assert.Equal(t, "unicast", cfg.transport)
	assert.True(t, cfg.graph)
	assert.Equal(t, "nccl", cfg.compare)
	assert.Equal(t, "x.json", cfg.jsonPath)
	assert.Equal(t, "x.PNG", cfg.plotPath)
	assert.Equal(t, "median", cfg.timing)
	assert.Equal(t, 90*time.Second, cfg.timeout)

	def, err := parseFlags(nil, io.Discard)
	require.NoError(t, err)
	assert.Equal(t, uint64(8), def.minBytes)
	assert.Equal(t, uint64(128<<20), def.maxBytes)
	assert.Equal(t, 20, def.iters)
	assert.Equal(t, 5, def.warmup)
	assert.Equal(t, 1, def.checkIters)
	assert.Equal(t, "float", def.dtype.NCCLName())
	assert.Equal(t, collAllReduce, def.coll)
	assert.Equal(t, "avg", def.timing)
}

func TestSizes(t *testing.T) {
	c := &config{minBytes: 8, maxBytes: 128, stepFactor: 2}
	assert.Equal(t, []uint64{8, 16, 32, 64, 128}, c.sizes(4))
	// Sizes round down to whole elements; sizes holding none are skipped.
	c = &config{minBytes: 1, maxBytes: 16, stepFactor: 2}
	assert.Equal(t, []uint64{8, 16}, c.sizes(8))
	c = &config{minBytes: 10, maxBytes: 1000, stepFactor: 10}
	assert.Equal(t, []uint64{8, 100, 1000}, c.sizes(4))
	c = &config{minBytes: 8, maxBytes: 4 << 30, stepFactor: 2}
	s := c.sizes(2)
	assert.Len(t, s, 30)
	assert.Equal(t, uint64(4<<30), s[len(s)-1])
	// No overflow at the top of the range.
	c = &config{minBytes: 1 << 62, maxBytes: 1<<64 - 1, stepFactor: 4}
	assert.Equal(t, []uint64{1 << 62}, c.sizes(4))
}

// -transport unicast puts the real driver behind a guard that refuses
// every cuMulticast* call; other transports leave it as it is.
func TestUnicastGuardsTheDriver(t *testing.T) {
	node := newSimNode(sim.Config{Devices: 2})
	defer node.Close()
	require.NoError(t, node.Init())
	d := guard(node, &config{transport: "unicast"})
	_, err := d.MulticastCreate(&cuda.MulticastProp{NumDevices: 2, Size: 2 << 20})
	require.ErrorIs(t, err, unicastonly.ErrMulticastForbidden)
	require.Empty(t, node.CallsOf("cuMulticastCreate"), "the call reached the driver")
	for _, tr := range []string{"auto", "multicast"} {
		require.Same(t, node, guard(node, &config{transport: tr}).(*sim.Node), tr)
	}
}
