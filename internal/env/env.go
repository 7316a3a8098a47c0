package env

import (
	"errors"
	"fmt"
	"math"
	"os"
	"regexp"
	"strconv"
	"strings"
	"time"
)

// The variables, by the package that reads them.
const (
	// Transport (team): auto, multicast or unicast.
	Transport = "NVLS_TRANSPORT"
	// Debug (team, vmm): the default logger's level, WARN, INFO or TRACE.
	Debug = "NVLS_DEBUG"
	// SetupTimeout (team, team/mpi): the bring-up's deadline, a duration.
	SetupTimeout = "NVLS_SETUP_TIMEOUT"
	// Timeout (collectives): the kernels' barrier deadline, a duration.
	Timeout = "NVLS_TIMEOUT"
	// LLMax (collectives): the largest LL all-reduce, a size.
	LLMax = "NVLS_LL_MAX"
	// OneShotMax (collectives): the largest one-shot all-reduce, a size.
	OneShotMax = "NVLS_ONESHOT_MAX"
	// Grid (collectives): the largest grid, an integer.
	Grid = "NVLS_GRID"
	// MinGrid (collectives): the grid a launch spreads over at one vector
	// a thread, an integer.
	MinGrid = "NVLS_MIN_GRID"
	// Launch (collectives): where calls launch, auto, caller or workers.
	Launch = "NVLS_LAUNCH"
	// PDL (collectives): programmatic dependent launch, auto, off, wait
	// or early.
	PDL = "NVLS_PDL"
	// CEMin (collectives): the smallest broadcast or all-gather of a
	// 2-rank team the copy engines move, a size; 0 never.
	CEMin = "NVLS_CE_MIN"
	// LLTwoMax (collectives): the largest reduce that runs LL in two
	// steps, a size; 0 never.
	LLTwoMax = "NVLS_LL_TWO_MAX"
	// LLTwoBcastMax (collectives): the largest broadcast that runs LL in
	// two steps, a size; 0 never.
	LLTwoBcastMax = "NVLS_LL_TWO_BCAST_MAX"
	// RingMin (collectives): the smallest reduce of 2 ranks or more that
	// runs as a ring, a size; 0 never.
	RingMin = "NVLS_RING_MIN"
	// RingBytes (collectives): the ring reduce's FIFO a rank, a size.
	RingBytes = "NVLS_RING_BYTES"
	// ReducePullMin (collectives): the smallest reduce the root pulls
	// alone (one-shot), a size; 0 never.
	ReducePullMin = "NVLS_REDUCE_PULL_MIN"
	// StageBytes (collectives): each staging area's size, a size.
	StageBytes = "NVLS_STAGE_BYTES"
	// PTXDir (ptx): a directory to load the PTX from, a path.
	PTXDir = "NVLS_PTX_DIR"
	// NVLSEnable (cuda, team): the ecosystem's multicast switch, NCCL's
	// name for it.
	NVLSEnable = "NCCL_NVLS_ENABLE"
	// GPUVRanks (gpu tests, internal/gputest): ranks on GPU 0, an integer.
	GPUVRanks = "NVLS_GPU_VRANKS"
	// RealNCCL (shim): the real NCCL's path, for the forwarded calls.
	RealNCCL = "NVLS_REAL_NCCL"
	// Sim (shim, built with -tags nvlssim): run on the simulated node.
	Sim = "NVLS_SIM"
	// SimDevices (shim, -tags nvlssim): the simulated node's devices.
	SimDevices = "NVLS_SIM_DEVICES"
	// Workspace (shim): each rank's data area (team.WithWorkspaceSize),
	// where ncclMemAlloc hands out memory that needs no copy.
	Workspace = "NVLS_WORKSPACE"
)

// Vars lists the variables above: the README's must name every one (a
// test checks it).
var Vars = []string{Transport, Debug, SetupTimeout, Timeout, LLMax, OneShotMax, Grid, MinGrid, Launch, PDL, CEMin, LLTwoMax, LLTwoBcastMax, RingMin, RingBytes, ReducePullMin, StageBytes, PTXDir, NVLSEnable, GPUVRanks, RealNCCL, Sim, SimDevices, Workspace}

// ErrBad is matched (errors.Is) by every *Error.
var ErrBad = errors.New("bad environment variable")

// Error is a variable whose value is not understood.
type Error struct {
	Var, Value string
	// Accepts says what the variable takes.
	Accepts string
	// Detail says what is wrong with Value beyond that, or is empty.
	Detail string
}

func (e *Error) Error() string {
	if e.Detail != "" {
		// What is wrong first: "want ..." alone reads as if the syntax were.
		return fmt.Sprintf("%s=%q: %s; want %s", e.Var, e.Value, e.Detail, e.Accepts)
	}
	return fmt.Sprintf("%s=%q: want %s", e.Var, e.Value, e.Accepts)
}

// Unwrap makes errors.Is(err, ErrBad) hold.
func (e *Error) Unwrap() error { return ErrBad }

// Source looks a variable up as os.LookupEnv does; tests pass their own.
type Source func(name string) (value string, ok bool)

// OS is the process's environment.
var OS Source = os.LookupEnv

// get is the variable's value with surrounding spaces removed, and
// whether it is set to something other than blanks. raw is the value as
// set, for the error.
func (s Source) get(name string) (v, raw string, set bool) {
	raw, ok := s(name)
	v = strings.TrimSpace(raw)
	return v, raw, ok && v != ""
}

// String is the variable's value (e.g. a path), trimmed; set is false
// when it is unset or blank.
func (s Source) String(name string) (v string, set bool) {
	v, _, set = s.get(name)
	return v, set
}

// Accepted forms, as the errors say them.
const (
	acceptSize     = "a size in bytes: a whole number with an optional unit K, M, G or T (powers of 1024; KiB, KB and B also), e.g. 262144, 256K or 1MiB"
	acceptDuration = "a duration more than zero: a Go duration such as 10s, 500ms or 1m30s, or a number of seconds such as 10 or 2.5"
)

// Size reads a byte count (ParseSize).
func (s Source) Size(name string) (n uint64, set bool, err error) {
	return parsed(s, name, acceptSize, ParseSize)
}

// Duration reads a positive duration (ParseDuration).
func (s Source) Duration(name string) (d time.Duration, set bool, err error) {
	return parsed(s, name, acceptDuration, ParseDuration)
}

// DurationSetting says a duration variable's value as messages name the
// setting: "NVLS_TIMEOUT=1ns", or "NVLS_TIMEOUT=90 (1m30s)" where the
// value as set is not how d reads; d is what Duration returned.
func (s Source) DurationSetting(name string, d time.Duration) string {
	v, _ := s.String(name)
	if v == d.String() {
		return name + "=" + v
	}
	return name + "=" + v + " (" + d.String() + ")"
}

// parsed reads name with parse; a value parse refuses is an *Error that
// says what is accepted.
func parsed[T any](s Source, name, accepts string, parse func(string) (T, error)) (x T, set bool, err error) {
	v, raw, set := s.get(name)
	if !set {
		return x, false, nil
	}
	if x, err = parse(v); err != nil {
		var zero T
		return zero, true, &Error{Var: name, Value: raw, Accepts: accepts, Detail: detail(err)}
	}
	return x, true, nil
}

// Int reads a whole number from lo to hi.
func (s Source) Int(name string, lo, hi int) (n int, set bool, err error) {
	v, raw, set := s.get(name)
	if !set {
		return 0, false, nil
	}
	n, err = strconv.Atoi(v)
	if err != nil || n < lo || n > hi {
		e := &Error{Var: name, Value: raw, Accepts: fmt.Sprintf("a whole number from %d to %d", lo, hi)}
		if err == nil || errors.Is(err, strconv.ErrRange) {
			e.Detail = "out of range"
		}
		return 0, true, e
	}
	return n, true, nil
}

// Enum reads one of values, in any case, and returns it as values spells
// it.
func (s Source) Enum(name string, values ...string) (v string, set bool, err error) {
	v, raw, set := s.get(name)
	if !set {
		return "", false, nil
	}
	for _, w := range values {
		if strings.EqualFold(v, w) {
			return w, true, nil
		}
	}
	return "", true, &Error{Var: name, Value: raw, Accepts: "one of " + strings.Join(values, ", ") + " (any case)"}
}

// ErrTooLarge is matched by the errors of ParseSize, ParseDuration and
// ParseNCCLInt for a number past what its type holds.
var ErrTooLarge = errors.New("too large")

// rangeError is a value past what its type holds: bound says the limit.
type rangeError struct{ v, bound string }

func (e *rangeError) Error() string { return fmt.Sprintf("%q: out of range: %s", e.v, e.bound) }

// Unwrap makes errors.Is(err, ErrTooLarge) hold.
func (e *rangeError) Unwrap() error { return ErrTooLarge }

// The limits, as the range errors say them.
var (
	boundSize     = fmt.Sprintf("larger than the largest size, %d bytes (16 EiB less one byte)", uint64(math.MaxUint64))
	boundDuration = "larger than the largest duration, " + time.Duration(math.MaxInt64).String()
	boundInt64    = fmt.Sprintf("past the 64-bit integers (%d to %d)", math.MinInt64, math.MaxInt64)
)

// detail is what an error of ParseSize, ParseDuration or ParseNCCLInt
// adds to Accepts (the syntax is in Accepts already): that the number is
// out of range, and the limit.
func detail(err error) string {
	var re *rangeError
	if errors.As(err, &re) {
		return "out of range: " + re.bound
	}
	return ""
}

// sizeUnits are ParseSize's units, longest first.
var sizeUnits = []struct {
	suffix string
	shift  uint
}{
	{"KIB", 10}, {"MIB", 20}, {"GIB", 30}, {"TIB", 40},
	{"KB", 10}, {"MB", 20}, {"GB", 30}, {"TB", 40},
	{"K", 10}, {"M", 20}, {"G", 30}, {"T", 40}, {"B", 0},
}

// ParseSize reads a byte count: a whole number with an optional unit K,
// M, G or T (powers of 1024, as nccl-tests reads its sizes), or KiB, KB
// or B, any case, spaces allowed around the number. It is the one size
// parser of nvls: the environment's and nvls-bench's flags'.
func ParseSize(v string) (uint64, error) {
	u := strings.ToUpper(strings.TrimSpace(v))
	var shift uint
	for _, unit := range sizeUnits {
		if strings.HasSuffix(u, unit.suffix) {
			shift, u = unit.shift, strings.TrimSpace(strings.TrimSuffix(u, unit.suffix))
			break
		}
	}
	if u == "" || strings.TrimLeft(u, "0123456789") != "" {
		return 0, fmt.Errorf("%q is not a size", v)
	}
	n, err := strconv.ParseUint(u, 10, 64)
	if err != nil || n > math.MaxUint64>>shift {
		return 0, &rangeError{v, boundSize}
	}
	return n << shift, nil
}

// ParseDuration reads a duration more than zero: a Go duration (10s,
// 500ms, 1m30s) or a bare number of seconds (10, 2.5).
func ParseDuration(v string) (time.Duration, error) {
	s := strings.TrimSpace(v)
	if isDecimal(s) {
		s += "s"
	}
	d, err := time.ParseDuration(s)
	if err != nil && goDuration.MatchString(s) && !strings.HasPrefix(s, "-") {
		// time.ParseDuration says "invalid" for a number it cannot hold.
		return 0, &rangeError{v, boundDuration}
	}
	if err != nil || d <= 0 {
		return 0, fmt.Errorf("%q is not a duration more than zero", v)
	}
	return d, nil
}

// goDuration is time.ParseDuration's syntax: a value it refuses that
// matches this is out of range.
var goDuration = regexp.MustCompile(`^[-+]?(0|(([0-9]+(\.[0-9]*)?|\.[0-9]+)(ns|us|µs|μs|ms|s|m|h))+)$`)

// isDecimal reports whether s is digits with at most one '.' among them
// (a number of seconds).
func isDecimal(s string) bool {
	digits, dots := 0, 0
	for _, c := range s {
		switch {
		case c >= '0' && c <= '9':
			digits++
		case c == '.':
			dots++
		default:
			return false
		}
	}
	return digits > 0 && dots <= 1
}
