package kernels

import "fmt"

// fullCountBits is the width of the count in a start barrier's arrival
// word (nvls.h: call_word); an LL line carries fewer bits.
const fullCountBits = 40

// Args are a call's arguments as a kernel's argument check saw them: what
// collectives.MismatchError reports for every rank.
type Args struct {
	Opcode uint32
	DType  DType
	Op     RedOp
	Root   int
	// Count is the folded count; exact below 2^CountBits elements.
	Count uint64
	// CountBits is 40 for a start barrier's word, 21 for an LL line's.
	CountBits int
}

// Field is the value of one argument ("count", "dtype", "op", "root",
// "collective") as text.
func (a Args) Field(name string) string {
	switch name {
	case "collective":
		return OpName(a.Opcode)
	case "count":
		if a.CountBits < fullCountBits {
			return fmt.Sprintf("%d (mod 2^%d)", a.Count, a.CountBits)
		}
		return fmt.Sprint(a.Count)
	case "dtype":
		return a.DType.String()
	case "op":
		return a.Op.String()
	case "root":
		return fmt.Sprint(a.Root)
	}
	return "?"
}

func (a Args) String() string {
	return fmt.Sprintf("%s count=%s dtype=%s op=%s root=%d", OpName(a.Opcode), a.Field("count"), a.DType, a.Op, a.Root)
}
