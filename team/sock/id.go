//go:build linux

package sock

import (
	"bytes"
	"encoding/binary"
	"errors"
	"fmt"
)

// IDBytes is the size of an ID: NCCL's NCCL_UNIQUE_ID_BYTES.
const IDBytes = 128

// ID names a rendezvous: what every rank passes to Join.
type ID [IDBytes]byte

// The layout of an ID: magic, token, the maker's pid, the socket's name
// (length-prefixed, without the leading '@' of the abstract namespace).
const (
	offToken = 8
	offPID   = offToken + tokenSize
	offName  = offPID + 4
	maxName  = IDBytes - offName - 1
)

// magic starts every ID NewID makes (the last byte is the layout's version).
var magic = [8]byte{'n', 'v', 'l', 's', 'u', 'i', 'd', 1}

// Errors of Join; match with errors.Is.
var (
	// ErrBadID: the ID was not made by NewID (another library's unique
	// id, zeroes, or a corrupted copy).
	ErrBadID = errors.New("sock: not an nvls unique id")
	// ErrStaleID: nothing answers at the ID's rendezvous: the process
	// that made it exited, or its job already started (an ID serves one).
	ErrStaleID = errors.New("sock: the unique id's rendezvous is gone")
	// ErrRefused: the rendezvous refused this rank (wrong token, rank out
	// of range or taken, another rank count, ranks that never came).
	ErrRefused = errors.New("sock: refused by the rendezvous")
)

func makeID(token []byte, pid int, name string) (ID, error) {
	var id ID
	if len(name) > maxName {
		return id, fmt.Errorf("sock: socket name %q longer than %d bytes", name, maxName)
	}
	copy(id[:], magic[:])
	copy(id[offToken:], token)
	binary.LittleEndian.PutUint32(id[offPID:], uint32(pid))
	id[offName] = byte(len(name))
	copy(id[offName+1:], name)
	return id, nil
}

// parse returns the ID's token, maker's pid and socket name.
func (id ID) parse() (token []byte, pid int, name string, err error) {
	if !bytes.Equal(id[:len(magic)], magic[:]) {
		return nil, 0, "", fmt.Errorf("%w (it does not start with nvls's magic; was it made by another library's ncclGetUniqueId, or not copied whole?)", ErrBadID)
	}
	n := int(id[offName])
	if n == 0 || n > maxName {
		return nil, 0, "", fmt.Errorf("%w: socket name length %d", ErrBadID, n)
	}
	name = string(id[offName+1 : offName+1+n])
	for _, b := range id[offName+1+n:] {
		if b != 0 {
			return nil, 0, "", fmt.Errorf("%w: bytes after the socket name are not zero", ErrBadID)
		}
	}
	return id[offToken:offPID], int(binary.LittleEndian.Uint32(id[offPID:])), name, nil
}

// String names the ID's rendezvous (never its token).
func (id ID) String() string {
	_, pid, name, err := id.parse()
	if err != nil {
		return "invalid id"
	}
	return fmt.Sprintf("@%s (made by pid %d)", name, pid)
}

// Check returns nil for an ID NewID could have made, else an error
// matching ErrBadID that says what is wrong.
func (id ID) Check() error {
	_, _, _, err := id.parse()
	return err
}
