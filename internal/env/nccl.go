package env

import (
	"errors"
	"math"
	"strconv"
	"strings"
)

// acceptNVLSEnable says what NCCL_NVLS_ENABLE takes.
const acceptNVLSEnable = "an integer as NCCL reads it (decimal, 0x hex or 0 octal, optional sign): " +
	"0 turns multicast off; any other (NCCL: 1 on, 2 its default, auto) leaves it to the transport choice; " +
	"NCCL ignores text after the number and reads text without one as 0, nvls refuses both so that a typo of the off switch never reads as on"

// NVLSEnable reads NCCL_NVLS_ENABLE, the ecosystem's multicast switch:
// off is true for 0. A value that is not an integer as NCCL reads it is an
// *Error, and then off is true too: a value of the safety switch that is
// not understood never means "on".
func (s Source) NVLSEnable() (off, set bool, err error) {
	v, raw, set := s.get(NVLSEnable)
	if !set {
		return false, false, nil
	}
	n, err := ParseNCCLInt(v)
	if err != nil {
		return true, true, &Error{Var: NVLSEnable, Value: raw, Accepts: acceptNVLSEnable, Detail: detail(err)}
	}
	return n == 0, true, nil
}

// ParseNCCLInt reads an integer as NCCL reads its integer variables
// (ncclLoadParam: strtoll(value, NULL, 0)): an optional sign, then 0x and
// hex digits, 0 and octal digits, or decimal digits; surrounding spaces
// are ignored. Where NCCL stops at the first character that is not a digit
// (so "1abc" is 1 and "abc" is 0), this refuses the value; a value past
// 64 bits, which NCCL replaces by its default, is an error too.
func ParseNCCLInt(v string) (int64, error) {
	s := strings.TrimSpace(v)
	neg := false
	if s != "" && (s[0] == '+' || s[0] == '-') {
		neg, s = s[0] == '-', s[1:]
	}
	base := 10
	switch {
	case len(s) > 2 && (s[:2] == "0x" || s[:2] == "0X"):
		base, s = 16, s[2:]
	case len(s) > 1 && s[0] == '0':
		base, s = 8, s[1:]
	}
	// ParseUint with an explicit base takes digits only (no prefix, no
	// sign, no underscores).
	if s == "" || s[0] == '+' || s[0] == '-' {
		return 0, errors.New("not an integer")
	}
	u, err := strconv.ParseUint(s, base, 64)
	var ne *strconv.NumError
	switch {
	case errors.As(err, &ne) && errors.Is(ne.Err, strconv.ErrRange):
		return 0, &rangeError{v, boundInt64}
	case err != nil:
		return 0, errors.New("not an integer")
	case !neg && u > math.MaxInt64, neg && u > 1<<63:
		return 0, &rangeError{v, boundInt64}
	case neg:
		return -int64(u), nil
	}
	return int64(u), nil
}
