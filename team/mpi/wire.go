//go:build mpi

package mpi

import (
	"encoding/binary"
	"fmt"
)

// Message kinds on the wire. Every message starts with its kind and the
// collective's name, so that a message is never empty (gompi's SendBytes
// cannot send an empty slice) and rank 0 can tell when ranks called
// different collectives.
const (
	kindData   byte = 1 // rank -> rank 0: its contribution
	kindResult byte = 2 // rank 0 -> rank: everyone's contributions
	kindFail   byte = 3 // rank 0 -> rank: why the collective failed
)

// frame builds a message: kind, op's length and op, then payload.
func frame(kind byte, op string, payload []byte) []byte {
	b := make([]byte, 0, 2+len(op)+len(payload))
	b = append(b, kind, byte(len(op)))
	b = append(b, op...)
	return append(b, payload...)
}

// unframe splits a message.
func unframe(b []byte) (kind byte, op string, payload []byte, err error) {
	if len(b) < 2 || int(b[1]) > len(b)-2 {
		return 0, "", nil, fmt.Errorf("mpi: malformed message (%d bytes)", len(b))
	}
	n := int(b[1])
	return b[0], string(b[2 : 2+n]), b[2+n:], nil
}

// encodeParts packs the contributions of every rank.
func encodeParts(parts [][]byte) []byte {
	size := binary.MaxVarintLen64
	for _, p := range parts {
		size += binary.MaxVarintLen64 + len(p)
	}
	b := make([]byte, 0, size)
	b = binary.AppendUvarint(b, uint64(len(parts)))
	for _, p := range parts {
		b = binary.AppendUvarint(b, uint64(len(p)))
		b = append(b, p...)
	}
	return b
}

// decodeParts unpacks encodeParts' output, expecting n parts. Each part
// is a copy (never nil).
func decodeParts(b []byte, n int) ([][]byte, error) {
	cnt, k := binary.Uvarint(b)
	if k <= 0 || cnt != uint64(n) {
		return nil, fmt.Errorf("mpi: result holds %d parts (header %d), want %d", cnt, k, n)
	}
	b = b[k:]
	out := make([][]byte, n)
	for i := range out {
		l, k := binary.Uvarint(b)
		if k <= 0 || l > uint64(len(b)-k) {
			return nil, fmt.Errorf("mpi: result part %d: bad length", i)
		}
		out[i] = append(make([]byte, 0, l), b[k:k+int(l)]...)
		b = b[k+int(l):]
	}
	if len(b) != 0 {
		return nil, fmt.Errorf("mpi: result has %d bytes past its parts", len(b))
	}
	return out, nil
}

// encodeRanks and decodeRanks carry a list of ranks (the missing ones).
func encodeRanks(ranks []int) []byte {
	b := binary.AppendUvarint(nil, uint64(len(ranks)))
	for _, r := range ranks {
		b = binary.AppendUvarint(b, uint64(r))
	}
	return b
}

func decodeRanks(b []byte) ([]int, []byte, error) {
	n, k := binary.Uvarint(b)
	if k <= 0 || n > uint64(len(b)) {
		return nil, nil, fmt.Errorf("mpi: bad rank list")
	}
	b = b[k:]
	out := make([]int, 0, n)
	for range n {
		r, k := binary.Uvarint(b)
		if k <= 0 || r > 1<<31 {
			return nil, nil, fmt.Errorf("mpi: bad rank list")
		}
		out = append(out, int(r))
		b = b[k:]
	}
	return out, b, nil
}
