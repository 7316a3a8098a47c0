package team

import (
	"context"
	"errors"
	"fmt"
	"log/slog"
	"math/big"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/nvls-go/nvls/cuda"
	"github.com/nvls-go/nvls/cuda/sim"
)

// TestEnvVariables is the table of every environment variable the team
// reads: good values and what they do, bad values and the *EnvError that
// names the variable and the allowed values (from resolve, and from New
// before any driver call).
func TestEnvVariables(t *testing.T) {
	type row struct {
		name, value string
		// bad: what the error must say the variable accepts ("" for a
		// good value).
		bad string
		// check looks at what a good value did.
		check func(t *testing.T, r resolved)
	}
	transport := func(want Transport, src string) func(*testing.T, resolved) {
		return func(t *testing.T, r resolved) {
			assert.Equal(t, want, r.request)
			assert.Equal(t, src, r.requestSrc)
		}
	}
	level := func(want slog.Level) func(*testing.T, resolved) {
		return func(t *testing.T, r resolved) {
			ctx := context.Background()
			assert.True(t, r.logger.Enabled(ctx, want), "level %v not shown", want)
			assert.False(t, r.logger.Enabled(ctx, want-1), "level below %v shown", want)
		}
	}
	timeout := func(want time.Duration, set bool) func(*testing.T, resolved) {
		return func(t *testing.T, r resolved) {
			assert.Equal(t, want, r.setupTimeout)
			assert.Equal(t, set, r.setupTimeoutSet)
		}
	}
	rows := []row{
		{EnvTransport, "auto", "", transport(Auto, "auto")},
		{EnvTransport, "multicast", "", transport(Multicast, "NVLS_TRANSPORT=multicast")},
		{EnvTransport, " UNICAST ", "", transport(Unicast, "NVLS_TRANSPORT=unicast")},
		{EnvTransport, "", "", transport(Auto, "auto")},
		{EnvTransport, "nvls", acceptTransport, nil},
		{EnvTransport, "uni cast", acceptTransport, nil},
		{EnvTransport, "0", acceptTransport, nil},
		{EnvTransport, "multicast,unicast", acceptTransport, nil},

		{EnvDebug, "WARN", "", level(slog.LevelWarn)},
		{EnvDebug, "info", "", level(slog.LevelInfo)},
		{EnvDebug, " Trace", "", level(LevelTrace)},
		{EnvDebug, "", "", level(slog.LevelWarn)},
		{EnvDebug, "DEBUG", acceptDebug, nil},
		{EnvDebug, "VERBOSE", acceptDebug, nil},
		{EnvDebug, "1", acceptDebug, nil},

		{EnvSetupTimeout, "90s", "", timeout(90*time.Second, true)},
		{EnvSetupTimeout, "2m", "", timeout(2*time.Minute, true)},
		{EnvSetupTimeout, "1m30s", "", timeout(90*time.Second, true)},
		{EnvSetupTimeout, "1500ms", "", timeout(1500*time.Millisecond, true)},
		{EnvSetupTimeout, "90", "", timeout(90*time.Second, true)},
		{EnvSetupTimeout, " 45 ", "", timeout(45*time.Second, true)},
		{EnvSetupTimeout, "", "", timeout(DefaultSetupTimeout, false)},
		{EnvSetupTimeout, "0", acceptDuration, nil},
		{EnvSetupTimeout, "0s", acceptDuration, nil},
		{EnvSetupTimeout, "-5s", acceptDuration, nil},
		{EnvSetupTimeout, "-1", acceptDuration, nil},
		{EnvSetupTimeout, "1.5", "", timeout(1500*time.Millisecond, true)},
		{EnvSetupTimeout, "10 s", acceptDuration, nil},
		{EnvSetupTimeout, "soon", acceptDuration, nil},
		{EnvSetupTimeout, "99999999999999999999", acceptDuration, nil},
		{EnvSetupTimeout, "9300000000", acceptDuration, nil}, // seconds past time.Duration
		{EnvSetupTimeout, "99999999999h", acceptDuration, nil},
	}
	for _, c := range rows {
		t.Run(fmt.Sprintf("%s=%q", c.name, c.value), func(t *testing.T) {
			t.Setenv(c.name, c.value)
			r, err := resolve(nil)
			if c.bad == "" {
				require.NoError(t, err)
				c.check(t, r)
				return
			}
			checkEnvError(t, err, c.name, c.value, c.bad)
			// New refuses it before it calls the driver.
			node := newNode(t, sim.Config{Devices: 2})
			_, err = New(testCtx(t), node, devices(2), WithWorkspaceSize(smallData), quiet())
			checkEnvError(t, err, c.name, c.value, c.bad)
			assert.Zero(t, node.CallCount(), "a driver call before the environment was checked")
		})
	}

}

// TestNCCLNVLSEnable: 0 in NCCL's spellings turns multicast off, any
// other integer leaves it on; a value that is not an integer as NCCL
// reads it is an error before any driver call, never "on" (issue 15:
// "abc" left multicast on).
func TestNCCLNVLSEnable(t *testing.T) {
	for _, c := range []struct {
		value string
		want  Transport
		bad   bool
	}{
		{"0", Unicast, false}, {" 0x0 ", Unicast, false}, {"00", Unicast, false}, {"1", Multicast, false}, {"2", Multicast, false}, {"", Multicast, false},
		{"abc", 0, true}, {"false", 0, true}, {"OFF", 0, true}, {" no ", 0, true}, {"yes", 0, true}, {"1abc", 0, true}, {"0 # off", 0, true},
	} {
		t.Run(fmt.Sprintf("%s=%q", cuda.EnvNVLSEnable, c.value), func(t *testing.T) {
			t.Setenv(cuda.EnvNVLSEnable, c.value)
			node := newNode(t, sim.Config{Devices: 2})
			tm, err := New(testCtx(t), node, devices(2), WithWorkspaceSize(smallData), quiet())
			if c.bad {
				checkEnvError(t, err, cuda.EnvNVLSEnable, c.value, "an integer as NCCL reads it")
				assert.Zero(t, node.CallCount(), "a driver call before the environment was checked")
				return
			}
			require.NoError(t, err)
			assert.Equal(t, c.want, tm.Transport())
			if c.want == Unicast {
				assert.Contains(t, tm.Reason(), "NCCL_NVLS_ENABLE=0")
				assert.Empty(t, node.CallsOf("cuMulticastCreate"))
			}
			require.NoError(t, tm.Close())
		})
	}
}

// What the errors say each variable accepts.
const (
	acceptTransport = "one of auto, multicast, unicast (any case)"
	acceptDebug     = "one of WARN, INFO, TRACE (any case)"
	acceptDuration  = "a duration more than zero: a Go duration such as 10s, 500ms or 1m30s, or a number of seconds such as 10 or 2.5"
)

func checkEnvError(t *testing.T, err error, name, value, accepts string) {
	t.Helper()
	require.Error(t, err)
	assert.ErrorIs(t, err, ErrBadEnv)
	var ee *EnvError
	require.ErrorAs(t, err, &ee)
	assert.Equal(t, name, ee.Var)
	assert.Equal(t, value, ee.Value)
	assert.Contains(t, ee.Accepts, accepts)
	prefix := fmt.Sprintf("team: %s=%q: want %s", name, value, accepts)
	if ee.Detail != "" {
		// What is wrong beyond the syntax comes first (issue 24).
		prefix = fmt.Sprintf("team: %s=%q: %s; want %s", name, value, ee.Detail, accepts)
	}
	assert.True(t, strings.HasPrefix(err.Error(), prefix), err.Error())
}

// TestOptionsBeatEnv: an option wins over its variable, but a bad value of
// the variable is still an error; a bad option is an error too.
func TestOptionsBeatEnv(t *testing.T) {
	t.Setenv(EnvSetupTimeout, "90s")
	r, err := resolve([]Option{WithSetupTimeout(5 * time.Second)})
	require.NoError(t, err)
	assert.Equal(t, 5*time.Second, r.setupTimeout)
	assert.True(t, r.setupTimeoutSet)

	t.Setenv(EnvSetupTimeout, "never")
	_, err = resolve([]Option{WithSetupTimeout(5 * time.Second)})
	checkEnvError(t, err, EnvSetupTimeout, "never", acceptDuration)

	t.Setenv(EnvSetupTimeout, "")
	for _, d := range []time.Duration{0, -time.Second} {
		_, err = resolve([]Option{WithSetupTimeout(d)})
		require.Error(t, err)
		assert.Contains(t, err.Error(), "WithSetupTimeout")
	}
}

// refEnv is the reference parse of the three variables for the fuzzer:
// whether each value is allowed, the transport and the timeout it means.
// secondsRE is a bare number of seconds.
var secondsRE = regexp.MustCompile(`^([0-9]+\.?[0-9]*|\.[0-9]+)$`)

func refEnv(transport, debug, timeout string) (okT, okD, okS bool, tr Transport, d time.Duration) {
	switch strings.ToLower(strings.TrimSpace(transport)) {
	case "", "auto":
		okT, tr = true, Auto
	case "multicast":
		okT, tr = true, Multicast
	case "unicast":
		okT, tr = true, Unicast
	}
	switch strings.ToUpper(strings.TrimSpace(debug)) {
	case "", "WARN", "INFO", "TRACE":
		okD = true
	}
	s := strings.TrimSpace(timeout)
	switch {
	case s == "":
		okS, d = true, DefaultSetupTimeout
	case secondsRE.MatchString(s):
		// A number of seconds: exact, truncated to the nanosecond.
		if r, ok := new(big.Rat).SetString(s); ok {
			r.Mul(r, big.NewRat(1e9, 1))
			ns := new(big.Int).Quo(r.Num(), r.Denom())
			if ns.Sign() > 0 && ns.IsInt64() {
				okS, d = true, time.Duration(ns.Int64())
			}
		}
	default:
		if x, err := time.ParseDuration(s); err == nil && x > 0 {
			okS, d = true, x
		}
	}
	return
}

// FuzzEnv: any values of NVLS_TRANSPORT, NVLS_DEBUG and
// NVLS_SETUP_TIMEOUT are either taken, meaning what the reference parse
// says, or refused with an *EnvError naming the first bad variable, its
// value and the allowed values. Nothing panics.
func FuzzEnv(f *testing.F) {
	for _, s := range [][3]string{
		{"auto", "WARN", "60s"}, {"unicast", "info", "90"}, {"Multicast", "TRACE", "1m30s"},
		{"", "", ""}, {"nvls", "", ""}, {"", "LOUD", ""}, {"", "", "0"}, {"", "", "-1s"},
		{" unicast\t", " trace ", " 15 "}, {"\x00", "\xff", "1e9s"}, {"", "", "92233720368"},
	} {
		f.Add(s[0], s[1], s[2])
	}
	f.Fuzz(func(t *testing.T, transport, debug, timeout string) {
		env := map[string]string{EnvTransport: transport, EnvDebug: debug, EnvSetupTimeout: timeout}
		lookup := func(k string) (string, bool) { v, ok := env[k]; return v, ok }
		r, err := resolveEnv(nil, lookup)
		okT, okD, okS, tr, d := refEnv(transport, debug, timeout)
		if err != nil {
			var ee *EnvError
			if !errors.As(err, &ee) {
				t.Fatalf("error %v (%T) is no *EnvError", err, err)
			}
			want := EnvTransport
			switch {
			case !okT:
			case !okD:
				want = EnvDebug
			case !okS:
				want = EnvSetupTimeout
			default:
				t.Fatalf("refused good values %q %q %q: %v", transport, debug, timeout, err)
			}
			if ee.Var != want || ee.Value != env[want] || ee.Accepts == "" {
				t.Fatalf("error %+v, want it to name %s=%q", ee, want, env[want])
			}
			msg := err.Error()
			if !strings.Contains(msg, want) || !strings.Contains(msg, strconv.Quote(env[want])) || !strings.Contains(msg, ee.Accepts) {
				t.Fatalf("message %q does not name the variable, value and allowed values", msg)
			}
			return
		}
		if !okT || !okD || !okS {
			t.Fatalf("took bad values %q %q %q (reference: %v %v %v)", transport, debug, timeout, okT, okD, okS)
		}
		if r.request != tr || r.setupTimeout-d > 1 || d-r.setupTimeout > 1 || r.setupTimeout <= 0 {
			t.Fatalf("%q %q %q: got transport %v timeout %v, want %v %v", transport, debug, timeout, r.request, r.setupTimeout, tr, d)
		}
		if set := strings.TrimSpace(timeout) != ""; set != r.setupTimeoutSet {
			t.Fatalf("timeout %q: set = %v", timeout, r.setupTimeoutSet)
		}
	})
}
