package kabi

import "fmt"

// Layout is one rank's workspace allocation, the same on every rank, and
// the one place that turns its sizes into offsets: the signal area the
// kernels own (SignalBytes at offset 0, its words at the offsets of
// abi.go), then the data area that team.Alloc hands out (the team's
// buffers, and the collectives' staging and LL areas, which collectives
// allocates from it), then the padding that rounds the allocation up to
// the granularity. team sizes and maps the workspace with it; collectives
// turns data offsets into workspace offsets and classifies pointers with
// it.
type Layout struct {
	// Data is the data area's size in bytes.
	Data uint64
	// Gran is the granularity the allocation is a multiple of (the
	// allocation granularity, and with multicast the multicast one: the
	// lcm over the ranks); 0 or 1: none.
	Gran uint64
}

// Region is where a workspace offset lies.
type Region int

const (
	// InSignal: the signal area, [0, SignalBytes).
	InSignal Region = iota
	// InData: the data area, [DataStart, DataEnd).
	InData
	// InPadding: past the data area, up to Size.
	InPadding
	// Outside: at or past Size.
	Outside
)

func (r Region) String() string {
	switch r {
	case InSignal:
		return "signal area"
	case InData:
		return "data area"
	case InPadding:
		return "padding"
	case Outside:
		return "outside the workspace"
	}
	return fmt.Sprintf("Region(%d)", int(r))
}

// Signal is the signal area's size.
func (l Layout) Signal() uint64 { return SignalBytes }

// DataStart is the workspace offset of the data area: data offset 0.
func (l Layout) DataStart() uint64 { return SignalBytes }

// DataEnd is the workspace offset where the data area ends.
func (l Layout) DataEnd() uint64 { return SignalBytes + l.Data }

// Size is the allocation's size: the signal and data areas rounded up to
// the granularity.
func (l Layout) Size() uint64 {
	n := l.DataEnd()
	if g := l.Gran; g > 1 && n%g != 0 {
		n += g - n%g
	}
	return n
}

// Padding is what rounding up to the granularity added.
func (l Layout) Padding() uint64 { return l.Size() - l.DataEnd() }

// At is the workspace offset of data offset off.
func (l Layout) At(off uint64) uint64 { return SignalBytes + off }

// Where says which region workspace offset off lies in.
func (l Layout) Where(off uint64) Region {
	switch {
	case off < SignalBytes:
		return InSignal
	case off < l.DataEnd():
		return InData
	case off < l.Size():
		return InPadding
	}
	return Outside
}
