package kabi

import (
	"fmt"
	"strings"

	"github.com/nvls-go/nvls/kernels"
)

// The argument check (nvls.h: call_word, ll_check, start_barrier, ll_wait).
// Every kernel carries the call's arguments: the host packs the opcode,
// element type, operator and root into Params.Check (CheckArgs), and the
// device adds the count. The start barrier's arrival words and the LL
// lines carry them, so a rank that called with other arguments than its
// peers is found on the device before any data moves, and recorded as
// StatusMismatch with every rank's word for the host to name.

// Field widths of CheckArgs: opcode 3 bits, element type 3, operator 2,
// root 3.
const (
	checkOpBits    = 3
	checkDTypeBits = 3
	checkRedOpBits = 2
	checkRootBits  = 3
	// checkArgsBits is the width of CheckArgs's word.
	checkArgsBits = checkOpBits + checkDTypeBits + checkRedOpBits + checkRootBits
	// wordCountBits is the count's width in an arrival word (folded);
	// llCountBits in an LL line's check.
	wordCountBits = 40
	llCountBits   = 32 - checkArgsBits
)

// Every value must fit its field (check_test.go checks the element types
// and operators).
var (
	_ [1<<checkRootBits - MaxRanks]struct{}
	_ [1<<checkOpBits - 1 - kernels.OpReduce]struct{}
)

// CheckArgs packs a call's opcode (kernels.Op*), element type, operator
// and root into Params.Check. A collective that has no element type,
// operator or root passes 0 for it, the same on every rank.
func CheckArgs(opcode uint32, dt kernels.DType, op kernels.RedOp, root int) uint32 {
	return opcode&(1<<checkOpBits-1) |
		uint32(dt)&(1<<checkDTypeBits-1)<<checkOpBits |
		uint32(op)&(1<<checkRedOpBits-1)<<(checkOpBits+checkDTypeBits) |
		uint32(root)&(1<<checkRootBits-1)<<(checkOpBits+checkDTypeBits+checkRedOpBits)
}

// CallWord is the 56-bit word the device makes of Params.Check and Count
// (nvls.h: call_word): the check in bits 40-50, the count folded to 40
// bits below. An arrival word adds the low 8 bits of the block's barrier
// sequence in bits 56-63.
//
// count is Params.CallCount, or Count where that is 0.
func CallWord(check uint32, count uint64) uint64 {
	const mask = 1<<wordCountBits - 1
	return uint64(check)<<wordCountBits | (count^count>>wordCountBits)&mask
}

// LLCheck is the 32-bit check an LL line carries (nvls.h: ll_check): the
// check in bits 21-31, the low 21 bits of the folded count below.
func LLCheck(check uint32, count uint64) uint32 {
	return check<<llCountBits | uint32(CallWord(check, count))&(1<<llCountBits-1)
}

// DecodeWord decodes an arrival word (or a word an LL kernel recorded:
// bits 56-63 zero, a 21-bit count). ok is false for 0: no word seen.
func DecodeWord(w uint64) (a kernels.Args, ok bool) {
	if w == 0 {
		return a, false
	}
	check := uint32(w>>wordCountBits) & (1<<checkArgsBits - 1)
	a = kernels.Args{
		Opcode:    check & (1<<checkOpBits - 1),
		DType:     kernels.DType(check >> checkOpBits & (1<<checkDTypeBits - 1)),
		Op:        kernels.RedOp(check >> (checkOpBits + checkDTypeBits) & (1<<checkRedOpBits - 1)),
		Root:      int(check >> (checkOpBits + checkDTypeBits + checkRedOpBits) & (1<<checkRootBits - 1)),
		Count:     w & (1<<wordCountBits - 1),
		CountBits: wordCountBits,
	}
	if w>>56 == 0 {
		a.CountBits = llCountBits
	}
	return a, true
}

// DescribeMismatch says which arguments differ among the ranks' words
// (index = rank; 0 = not seen) and which ranks hold which value, e.g.
// "count: ranks 0, 1, 2 have 1024, rank 3 has 512".
func DescribeMismatch(words []uint64) string {
	args := make([]kernels.Args, len(words))
	seen := make([]bool, len(words))
	for r, w := range words {
		args[r], seen[r] = DecodeWord(w)
	}
	var fields []string
	for _, f := range []string{"collective", "count", "dtype", "op", "root"} {
		groups := map[string][]int{}
		var order []string
		for r := range words {
			if !seen[r] {
				continue
			}
			v := args[r].Field(f)
			if f == "count" {
				v = fmt.Sprint(args[r].Count & (1<<llCountBits - 1))
				if minBits(args, seen) == wordCountBits {
					v = fmt.Sprint(args[r].Count)
				}
			}
			if _, ok := groups[v]; !ok {
				order = append(order, v)
			}
			groups[v] = append(groups[v], r)
		}
		if len(order) < 2 {
			continue
		}
		var parts []string
		for _, v := range order {
			rs := groups[v]
			verb := "has"
			if len(rs) > 1 {
				verb = "have"
			}
			parts = append(parts, fmt.Sprintf("%s %s %s", rankList(rs), verb, v))
		}
		fields = append(fields, f+": "+strings.Join(parts, ", "))
	}
	if len(fields) == 0 {
		return "the ranks' arguments differ"
	}
	return strings.Join(fields, "; ")
}

// minBits is the fewest count bits among the seen words.
func minBits(args []kernels.Args, seen []bool) int {
	bits := wordCountBits
	for r, a := range args {
		if seen[r] {
			bits = min(bits, a.CountBits)
		}
	}
	return bits
}

func rankList(rs []int) string {
	s := make([]string, len(rs))
	for i, r := range rs {
		s[i] = fmt.Sprint(r)
	}
	if len(rs) == 1 {
		return "rank " + s[0]
	}
	return "ranks " + strings.Join(s, ", ")
}
