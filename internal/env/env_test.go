package env

import (
	"errors"
	"fmt"
	"math"
	"testing"
	"time"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// one is a Source holding one variable.
func one(name, value string) Source {
	return func(n string) (string, bool) {
		if n == name {
			return value, true
		}
		return "", false
	}
}

// checkBad: err is an *Error naming the variable, the value as set and
// what it accepts, and matches ErrBad.
func checkBad(t *testing.T, err error, name, value, accepts string) {
	t.Helper()
	require.Error(t, err)
	assert.ErrorIs(t, err, ErrBad)
	var e *Error
	require.True(t, errors.As(err, &e), "%v is no *Error", err)
	assert.Equal(t, name, e.Var)
	assert.Equal(t, value, e.Value)
	assert.Contains(t, e.Accepts, accepts)
	if e.Detail == "" {
		assert.Contains(t, err.Error(), fmt.Sprintf("%s=%q: want ", name, value))
	} else {
		assert.Contains(t, err.Error(), fmt.Sprintf("%s=%q: %s; want ", name, value, e.Detail))
	}
	assert.Contains(t, err.Error(), "want "+e.Accepts)
}

// checkRange: err is checkBad's, and says first that the value is out of
// range and what the limit is (issue 24: NVLS_TIMEOUT=99999999999h said
// only "want a duration more than zero").
func checkRange(t *testing.T, err error, name, value, accepts, bound string) {
	t.Helper()
	checkBad(t, err, name, value, accepts)
	assert.Contains(t, err.Error(), fmt.Sprintf("%s=%q: out of range: %s; want ", name, value, bound))
	assert.ErrorIs(t, err, ErrBad)
}

// notRange: a value refused for its syntax or sign says nothing of range.
func notRange(t *testing.T, err error) {
	t.Helper()
	var e *Error
	require.ErrorAs(t, err, &e)
	assert.Empty(t, e.Detail)
	assert.NotContains(t, err.Error(), "out of range")
}

// TestUnsetAndBlank: unset, empty and blank are all "not set", for every
// kind.
func TestUnsetAndBlank(t *testing.T) {
	for _, src := range []Source{one("X", "ignored"), one("V", ""), one("V", "  \t")} {
		_, set, err := src.Size("V")
		assert.False(t, set)
		assert.NoError(t, err)
		_, set, err = src.Duration("V")
		assert.False(t, set)
		assert.NoError(t, err)
		_, set, err = src.Int("V", 1, 2)
		assert.False(t, set)
		assert.NoError(t, err)
		_, set, err = src.Enum("V", "a")
		assert.False(t, set)
		assert.NoError(t, err)
		_, set = src.String("V")
		assert.False(t, set)
	}
	_, set, err := one("X", "0").NVLSEnable()
	assert.False(t, set)
	assert.NoError(t, err)
	v, set := one("V", " /tmp/ptx ").String("V")
	assert.True(t, set)
	assert.Equal(t, "/tmp/ptx", v)
}

func TestSize(t *testing.T) {
	good := map[string]uint64{
		"0": 0, "262144": 262144, " 256K ": 256 << 10, "256k": 256 << 10, "256KB": 256 << 10, "256KiB": 256 << 10,
		"1MiB": 1 << 20, "1 M": 1 << 20, "4G": 4 << 30, "2gib": 2 << 30, "1T": 1 << 40, "512B": 512, "512 b": 512,
		"18446744073709551615": math.MaxUint64, "16777215T": 16777215 << 40,
	}
	for v, want := range good {
		n, set, err := one("NVLS_LL_MAX", v).Size("NVLS_LL_MAX")
		require.NoError(t, err, v)
		assert.True(t, set)
		assert.Equal(t, want, n, v)
	}
	for _, v := range []string{"-1", "1.5M", "K", "12Q", "0x10", "1_000", "abc", "1e6", "1 2", "+5"} {
		_, set, err := one("NVLS_LL_MAX", v).Size("NVLS_LL_MAX")
		assert.True(t, set)
		checkBad(t, err, "NVLS_LL_MAX", v, "a size in bytes")
		notRange(t, err)
	}
	for _, v := range []string{"18446744073709551616", "16777216T", "99999999999999999999G", "18014398509481984K"} {
		_, _, err := one("NVLS_LL_MAX", v).Size("NVLS_LL_MAX")
		checkRange(t, err, "NVLS_LL_MAX", v, "a size in bytes", "larger than the largest size, 18446744073709551615 bytes (16 EiB less one byte)")
		_, err = ParseSize(v)
		assert.ErrorIs(t, err, ErrTooLarge)
	}
}

// TestDuration: one rule for every duration: a Go duration or a bare
// number of seconds, more than zero (issue 15: NVLS_TIMEOUT refused bare
// seconds, NVLS_SETUP_TIMEOUT wanted them).
func TestDuration(t *testing.T) {
	good := map[string]time.Duration{
		"10s": 10 * time.Second, "500ms": 500 * time.Millisecond, "1m30s": 90 * time.Second, " 2m ": 2 * time.Minute,
		"90": 90 * time.Second, "2.5": 2500 * time.Millisecond, "0.25": 250 * time.Millisecond, "1.": time.Second, ".5": 500 * time.Millisecond,
		"1h": time.Hour,
	}
	for v, want := range good {
		d, set, err := one("NVLS_TIMEOUT", v).Duration("NVLS_TIMEOUT")
		require.NoError(t, err, v)
		assert.True(t, set)
		assert.Equal(t, want, d, v)
	}
	const accepts = "a Go duration such as 10s, 500ms or 1m30s, or a number of seconds such as 10 or 2.5"
	for _, v := range []string{"0", "0s", "-5s", "-1", "10 s", "soon", "1.2.3", ".", "1e3", "10sec", "-99999999999h", "1h-", "99999999999x", ".h"} {
		_, set, err := one("NVLS_TIMEOUT", v).Duration("NVLS_TIMEOUT")
		assert.True(t, set)
		checkBad(t, err, "NVLS_TIMEOUT", v, accepts)
		notRange(t, err)
	}
	// Past time.Duration (about 292 years): out of range, not "want a
	// duration more than zero" alone.
	max := time.Duration(math.MaxInt64)
	d, _, err := one("NVLS_TIMEOUT", max.String()).Duration("NVLS_TIMEOUT")
	require.NoError(t, err)
	assert.Equal(t, max, d)
	for _, v := range []string{"99999999999h", "2562048h", "2562047h47m16.854775808s", "9223372036854775808ns", "99999999999999999999ms", "1h99999999999h", "9300000000", "99999999999999999999", "+9300000000s"} {
		_, _, err := one("NVLS_TIMEOUT", v).Duration("NVLS_TIMEOUT")
		checkRange(t, err, "NVLS_TIMEOUT", v, accepts, "larger than the largest duration, 2562047h47m16.854775807s")
		_, err = ParseDuration(v)
		assert.ErrorIs(t, err, ErrTooLarge)
	}
}

func TestDurationSetting(t *testing.T) {
	for v, want := range map[string]string{"1ns": "NVLS_TIMEOUT=1ns", " 90s ": "NVLS_TIMEOUT=90s (1m30s)", "90": "NVLS_TIMEOUT=90 (1m30s)", "1m30s": "NVLS_TIMEOUT=1m30s"} {
		src := one("NVLS_TIMEOUT", v)
		d, _, err := src.Duration("NVLS_TIMEOUT")
		require.NoError(t, err)
		assert.Equal(t, want, src.DurationSetting("NVLS_TIMEOUT", d), "%q", v)
	}
}

func TestIntAndEnum(t *testing.T) {
	n, set, err := one("NVLS_GRID", " 12 ").Int("NVLS_GRID", 1, 132)
	require.NoError(t, err)
	assert.True(t, set)
	assert.Equal(t, 12, n)
	for _, v := range []string{"1.5", "0x10", "twelve"} {
		_, _, err := one("NVLS_GRID", v).Int("NVLS_GRID", 1, 132)
		checkBad(t, err, "NVLS_GRID", v, "a whole number from 1 to 132")
		notRange(t, err)
	}
	for _, v := range []string{"0", "133", "-1", "99999999999999999999"} {
		_, _, err := one("NVLS_GRID", v).Int("NVLS_GRID", 1, 132)
		checkBad(t, err, "NVLS_GRID", v, "a whole number from 1 to 132")
		assert.Contains(t, err.Error(), fmt.Sprintf("NVLS_GRID=%q: out of range; want a whole number from 1 to 132", v))
	}
	w, set, err := one("NVLS_DEBUG", " info").Enum("NVLS_DEBUG", "WARN", "INFO", "TRACE")
	require.NoError(t, err)
	assert.True(t, set)
	assert.Equal(t, "INFO", w)
	_, _, err = one("NVLS_DEBUG", "LOUD").Enum("NVLS_DEBUG", "WARN", "INFO", "TRACE")
	checkBad(t, err, "NVLS_DEBUG", "LOUD", "one of WARN, INFO, TRACE (any case)")
}

// TestNVLSEnable: NCCL_NVLS_ENABLE takes what NCCL's strtoll(v, NULL, 0)
// reads as a whole integer; 0 in any spelling is off; anything else NCCL
// would read (text, text after the number, past 64 bits) is an error and
// off (issue 15: "abc" was ignored and multicast stayed on).
func TestNVLSEnable(t *testing.T) {
	for v, off := range map[string]bool{
		"0": true, "00": true, "0x0": true, "-0": true, "+0": true, " 0 ": true, "\t0\n": true,
		"1": false, "2": false, "0x2": false, "010": false, "-1": false, "+1": false, "9223372036854775807": false, "-9223372036854775808": false,
	} {
		got, set, err := one(NVLSEnable, v).NVLSEnable()
		require.NoError(t, err, "%q", v)
		assert.True(t, set)
		assert.Equal(t, off, got, "%q", v)
	}
	for _, v := range []string{"abc", "false", "off", "no", "yes", "on", "true", "1abc", "0abc", "08", "0x", "0xg", "1_0", "0b1", "0o7", "--1", "+-1", "1.0", "1 0"} {
		got, set, err := one(NVLSEnable, v).NVLSEnable()
		assert.True(t, set)
		assert.True(t, got, "%q: a value not understood must read as off", v)
		checkBad(t, err, NVLSEnable, v, "an integer as NCCL reads it")
		notRange(t, err)
	}
	for _, v := range []string{"9223372036854775808", "-9223372036854775809", "0x10000000000000000", "99999999999999999999"} {
		got, _, err := one(NVLSEnable, v).NVLSEnable()
		assert.True(t, got, "%q: a value not understood must read as off", v)
		checkRange(t, err, NVLSEnable, v, "an integer as NCCL reads it", "past the 64-bit integers (-9223372036854775808 to 9223372036854775807)")
		_, err = ParseNCCLInt(v)
		assert.ErrorIs(t, err, ErrTooLarge)
	}
}

func TestParseNCCLInt(t *testing.T) {
	for v, want := range map[string]int64{"0x1F": 31, "0X1f": 31, "017": 15, "-017": -15, "42": 42, " -7 ": -7} {
		n, err := ParseNCCLInt(v)
		require.NoError(t, err, v)
		assert.Equal(t, want, n, v)
	}
	_, err := ParseNCCLInt("")
	assert.Error(t, err)
}
