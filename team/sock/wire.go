//go:build linux

package sock

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"net"
	"syscall"

	"github.com/nvls-go/nvls/team/mpi/fdpass"
)

// tokenSize is the job token's size: fdpass's, since the same token
// guards the descriptor-passing sockets.
const tokenSize = fdpass.TokenSize

// maxFrame bounds a frame a peer can make us read.
const maxFrame = 64 << 20

// Reply status bytes.
const (
	statusOK      = 0
	statusRefused = 1
)

func writeFrame(w io.Writer, b []byte) error {
	buf := make([]byte, 4+len(b))
	binary.LittleEndian.PutUint32(buf, uint32(len(b)))
	copy(buf[4:], b)
	_, err := w.Write(buf)
	return err
}

func readFrame(r io.Reader) ([]byte, error) {
	var h [4]byte
	if _, err := io.ReadFull(r, h[:]); err != nil {
		return nil, err
	}
	n := binary.LittleEndian.Uint32(h[:])
	if n > maxFrame {
		return nil, fmt.Errorf("sock: frame of %d bytes (at most %d)", n, maxFrame)
	}
	b := make([]byte, n)
	_, err := io.ReadFull(r, b)
	return b, err
}

// hello is what a rank sends the rendezvous first.
type hello struct {
	token        []byte
	nranks, rank int
	pid          int
	path         string // its fdpass server's socket
}

func (h hello) marshal() []byte {
	b := make([]byte, 0, 8+tokenSize+12+len(h.path))
	b = append(b, magic[:]...)
	b = append(b, h.token...)
	b = binary.LittleEndian.AppendUint32(b, uint32(h.nranks))
	b = binary.LittleEndian.AppendUint32(b, uint32(h.rank))
	b = binary.LittleEndian.AppendUint32(b, uint32(h.pid))
	return append(b, h.path...)
}

func parseHello(b []byte) (hello, error) {
	if len(b) < 8+tokenSize+12 || string(b[:8]) != string(magic[:]) {
		return hello{}, errors.New("not an nvls hello")
	}
	b = b[8:]
	h := hello{token: b[:tokenSize]}
	b = b[tokenSize:]
	h.nranks = int(int32(binary.LittleEndian.Uint32(b)))
	h.rank = int(int32(binary.LittleEndian.Uint32(b[4:])))
	h.pid = int(binary.LittleEndian.Uint32(b[8:]))
	h.path = string(b[12:])
	return h, nil
}

// packList is n length-prefixed byte strings.
func packList(items [][]byte) []byte {
	var b []byte
	b = binary.LittleEndian.AppendUint32(b, uint32(len(items)))
	for _, it := range items {
		b = binary.LittleEndian.AppendUint32(b, uint32(len(it)))
		b = append(b, it...)
	}
	return b
}

func unpackList(b []byte) ([][]byte, error) {
	if len(b) < 4 {
		return nil, errors.New("short list")
	}
	n := int(binary.LittleEndian.Uint32(b))
	b = b[4:]
	if n > 1<<16 {
		return nil, fmt.Errorf("list of %d items", n)
	}
	out := make([][]byte, n)
	for i := range out {
		if len(b) < 4 {
			return nil, errors.New("short list")
		}
		m := int(binary.LittleEndian.Uint32(b))
		b = b[4:]
		if len(b) < m {
			return nil, errors.New("short list")
		}
		out[i] = b[:m:m]
		b = b[m:]
	}
	return out, nil
}

// reply is a status byte, then a list (OK) or a reason (refused).
func okReply(items [][]byte) []byte { return append([]byte{statusOK}, packList(items)...) }

func refusal(reason string) []byte { return append([]byte{statusRefused}, reason...) }

// parseReply returns the list, or the refusal as an error matching
// ErrRefused.
func parseReply(b []byte) ([][]byte, error) {
	if len(b) == 0 {
		return nil, errors.New("sock: empty reply")
	}
	if b[0] == statusRefused {
		return nil, fmt.Errorf("%w: %s", ErrRefused, b[1:])
	}
	return unpackList(b[1:])
}

// peerUID is the uid of the process at the other end of c.
func peerUID(c *net.UnixConn) (int, error) {
	raw, err := c.SyscallConn()
	if err != nil {
		return -1, err
	}
	var cred *syscall.Ucred
	var cerr error
	if err := raw.Control(func(fd uintptr) {
		cred, cerr = syscall.GetsockoptUcred(int(fd), syscall.SOL_SOCKET, syscall.SO_PEERCRED)
	}); err != nil {
		return -1, err
	}
	if cerr != nil {
		return -1, cerr
	}
	return int(cred.Uid), nil
}
