package team

import (
	"bytes"
	"log/slog"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/nvls-go/nvls/cuda"
	"github.com/nvls-go/nvls/multicast"
)

func TestResolveEnv(t *testing.T) {
	cases := []struct {
		name      string
		transport string // "" = unset
		debug     string
		opts      []Option
		want      Transport
		src       string
		errVar    string
	}{
		{name: "default", want: Auto, src: "auto"},
		{name: "env unicast", transport: "unicast", want: Unicast, src: "NVLS_TRANSPORT=unicast"},
		{name: "env MULTICAST any case", transport: " MULTICAST ", want: Multicast, src: "NVLS_TRANSPORT=multicast"},
		{name: "env auto", transport: "auto", want: Auto, src: "auto"},
		{name: "option beats env", transport: "multicast", opts: []Option{WithTransport(Unicast)}, want: Unicast, src: "WithTransport(unicast)"},
		{name: "bad transport", transport: "nvls", errVar: EnvTransport},
		{name: "bad transport even with option", transport: "fast", opts: []Option{WithTransport(Unicast)}, errVar: EnvTransport},
		{name: "bad debug", debug: "VERBOSE", errVar: EnvDebug},
		{name: "debug info", debug: "info", want: Auto, src: "auto"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			if c.transport != "" {
				t.Setenv(EnvTransport, c.transport)
			}
			if c.debug != "" {
				t.Setenv(EnvDebug, c.debug)
			}
			r, err := resolve(c.opts)
			if c.errVar != "" {
				require.Error(t, err)
				assert.ErrorIs(t, err, ErrBadEnv)
				var ee *EnvError
				require.ErrorAs(t, err, &ee)
				assert.Equal(t, c.errVar, ee.Var)
				assert.Contains(t, err.Error(), c.errVar)
				assert.Contains(t, err.Error(), "want ")
				return
			}
			require.NoError(t, err)
			assert.Equal(t, c.want, r.request)
			assert.Equal(t, c.src, r.requestSrc)
			assert.Equal(t, uint64(DefaultDataBytes), r.dataBytes)
			assert.Equal(t, DefaultFabricRetries, r.retries)
			assert.Equal(t, DefaultFabricRetryWithin, r.retryWithin)
		})
	}
	r, err := resolve([]Option{WithFabricRetry(0, 0)})
	require.NoError(t, err)
	assert.Zero(t, r.retries, "retries off")
}

func TestDefaultLoggerLevels(t *testing.T) {
	for _, c := range []struct {
		env              string
		info, trace, wrn bool
	}{
		{"", false, false, true},
		{"WARN", false, false, true},
		{"INFO", true, false, true},
		{"trace", true, true, true},
	} {
		if c.env != "" {
			t.Setenv(EnvDebug, c.env)
		}
		lvl, err := debugLevel()
		require.NoError(t, err)
		var buf bytes.Buffer
		l := newDefaultLogger(&buf, lvl)
		l.Info("i")
		l.Log(t.Context(), LevelTrace, "t")
		l.Warn("w")
		out := buf.String()
		assert.Equal(t, c.info, strings.Contains(out, "msg=i"), c.env)
		assert.Equal(t, c.trace, strings.Contains(out, "level=TRACE msg=t"), c.env)
		assert.Equal(t, c.wrn, strings.Contains(out, "msg=w"), c.env)
	}
}

func TestParseTransport(t *testing.T) {
	for s, want := range map[string]Transport{"auto": Auto, "Multicast": Multicast, "UNICAST": Unicast} {
		got, err := ParseTransport(s)
		require.NoError(t, err)
		assert.Equal(t, want, got)
		assert.Equal(t, strings.ToLower(s), got.String())
	}
	_, err := ParseTransport("both")
	require.Error(t, err)
}

func mkFacts(n int) []facts {
	out := make([]facts, n)
	for r := range out {
		out[r] = facts{
			Rank: r, Device: cuda.Device(r), PCI: string(rune('A' + r)), SMCount: 132 - r, AllocGran: 2 << 20,
			Support:    multicast.Support{Device: cuda.Device(r), DriverVersion: 13000, VMM: true, Multicast: true, PosixFD: true},
			Request:    Auto,
			RequestSrc: "auto",
		}
	}
	return out
}

// TestDecide covers the cross-rank rules of the transport choice (the
// single-process table is TestOffSwitch, on the sim).
func TestDecide(t *testing.T) {
	all := mkFacts(4)
	d, err := decide(all, false)
	require.NoError(t, err)
	assert.Equal(t, Multicast, d.transport)
	assert.Equal(t, 129, d.smCount)
	assert.Equal(t, cuda.HandlePosixFD, d.handles)

	// One rank's NCCL_NVLS_ENABLE=0 turns multicast off for all.
	all = mkFacts(4)
	all[2].NVLSOff = true
	d, err = decide(all, false)
	require.NoError(t, err)
	assert.Equal(t, Unicast, d.transport)
	assert.Contains(t, d.reason, "NCCL_NVLS_ENABLE=0 on rank(s) [2]")

	// ... and an explicit request for multicast on another rank is an error.
	all[0].Request, all[0].RequestSrc = Multicast, "NVLS_TRANSPORT=multicast"
	_, err = decide(all, false)
	require.ErrorIs(t, err, cuda.ErrMulticastDisabled)

	// Ranks asking for different transports.
	all = mkFacts(3)
	all[0].Request, all[0].RequestSrc = Multicast, "WithTransport(multicast)"
	all[1].Request, all[1].RequestSrc = Unicast, "NVLS_TRANSPORT=unicast"
	_, err = decide(all, false)
	require.ErrorIs(t, err, ErrTransportConflict)
	assert.Contains(t, err.Error(), "NVLS_TRANSPORT=unicast on rank(s) [1]")

	// An explicit request on one rank, auto on the others: the request wins.
	all = mkFacts(3)
	all[1].Request, all[1].RequestSrc = Unicast, "NVLS_TRANSPORT=unicast"
	d, err = decide(all, false)
	require.NoError(t, err)
	assert.Equal(t, Unicast, d.transport)

	// Across processes POSIX FDs are required.
	all = mkFacts(2)
	all[1].Support.PosixFD = false
	_, err = decide(all, false)
	require.ErrorIs(t, err, cuda.ErrNotSupported)
	d, err = decide(all, true)
	require.NoError(t, err)
	assert.Equal(t, cuda.HandleNone, d.handles)

	// The same GPU twice; no VMM; too many ranks.
	all = mkFacts(2)
	all[1].PCI = all[0].PCI
	_, err = decide(all, true)
	require.ErrorIs(t, err, ErrBadDevices)
	all = mkFacts(2)
	all[1].Support.VMM = false
	_, err = decide(all, true)
	require.ErrorIs(t, err, ErrNoVMM)
	_, err = decide(mkFacts(9), true)
	require.ErrorIs(t, err, ErrBadDevices)

	// An old driver: auto falls back to unicast and says why.
	all = mkFacts(2)
	all[0].Support.DriverVersion = 12000
	d, err = decide(all, true)
	require.NoError(t, err)
	assert.Equal(t, Unicast, d.transport)
	assert.Contains(t, d.reason, "12000")
}

func TestWithLoggerOption(t *testing.T) {
	var buf bytes.Buffer
	l := slog.New(slog.NewTextHandler(&buf, nil))
	r, err := resolve([]Option{WithLogger(l), WithWorkspaceSize(1 << 20), nil})
	require.NoError(t, err)
	assert.Same(t, l, r.logger)
	assert.Equal(t, uint64(1<<20), r.dataBytes)
}
