//go:build linux

package fdpass

import (
	"crypto/rand"
	"encoding/binary"
	"errors"
	"fmt"
)

// TokenSize is the length of a job token in bytes.
const TokenSize = 32

// NewToken returns a fresh random job token.
func NewToken() ([]byte, error) {
	t := make([]byte, TokenSize)
	if _, err := rand.Read(t); err != nil {
		return nil, fmt.Errorf("fdpass: job token: %w", err)
	}
	return t, nil
}

// magic starts every hello; its last bytes are the protocol version.
var magic = [8]byte{'N', 'V', 'L', 'S', 'F', 'D', '0', '1'}

// helloSize is the size of the hello message on the wire.
const helloSize = 64

// hello is what a client sends first on a connection.
type hello struct {
	Token [TokenSize]byte
	From  uint32
	To    uint32
	Seq   uint64
	HasFD bool
}

func (h hello) marshal() []byte {
	b := make([]byte, helloSize)
	copy(b[0:8], magic[:])
	copy(b[8:40], h.Token[:])
	binary.LittleEndian.PutUint32(b[40:44], h.From)
	binary.LittleEndian.PutUint32(b[44:48], h.To)
	binary.LittleEndian.PutUint64(b[48:56], h.Seq)
	if h.HasFD {
		b[56] = 1
	}
	return b
}

var errBadHello = errors.New("malformed hello")

// parseHello decodes a hello; it checks the framing only (the token and
// ranks are the server's business).
func parseHello(b []byte) (hello, error) {
	var h hello
	if len(b) != helloSize {
		return h, fmt.Errorf("%w: %d bytes, want %d", errBadHello, len(b), helloSize)
	}
	if [8]byte(b[0:8]) != magic {
		return h, fmt.Errorf("%w: bad magic %q", errBadHello, b[0:8])
	}
	copy(h.Token[:], b[8:40])
	h.From = binary.LittleEndian.Uint32(b[40:44])
	h.To = binary.LittleEndian.Uint32(b[44:48])
	h.Seq = binary.LittleEndian.Uint64(b[48:56])
	switch b[56] {
	case 0:
	case 1:
		h.HasFD = true
	default:
		return h, fmt.Errorf("%w: fd flag %d", errBadHello, b[56])
	}
	for _, x := range b[57:] {
		if x != 0 {
			return h, fmt.Errorf("%w: nonzero padding", errBadHello)
		}
	}
	return h, nil
}

// Replies from the server: one status byte, then for statusRefused one
// length byte and that many bytes of reason.
const (
	statusOK      byte = 0
	statusRefused byte = 1
)

func refusal(reason string) []byte {
	if len(reason) > 255 {
		reason = reason[:255]
	}
	return append([]byte{statusRefused, byte(len(reason))}, reason...)
}
