//go:build linux

package fdtest

import (
	"fmt"
	"os"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

// Snapshot is what this process's descriptors referred to at one moment:
// each open descriptor's number and the identity (device, inode) of its
// file.
type Snapshot map[int][2]uint64

// Take lists /proc/self/fd and asks each descriptor for its file. The
// descriptor the listing itself used is closed by then and left out.
func Take() (Snapshot, error) {
	ents, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		return nil, fmt.Errorf("fdtest: %w", err)
	}
	s := Snapshot{}
	for _, e := range ents {
		fd, err := strconv.Atoi(e.Name())
		if err != nil {
			continue
		}
		if dev, ino, err := Identity(fd); err == nil {
			s[fd] = [2]uint64{dev, ino}
		}
	}
	return s, nil
}

// Added returns, in order, the descriptors open now that were not open at
// s on the same file: those opened since, a number closed and reused for
// another file included. Descriptors closed since do not count.
func (s Snapshot) Added() ([]int, error) {
	now, err := Take()
	if err != nil {
		return nil, err
	}
	var added []int
	for fd, id := range now {
		if old, ok := s[fd]; !ok || old != id {
			added = append(added, fd)
		}
	}
	slices.Sort(added)
	return added, nil
}

// NoneAdded waits up to 5 s for no descriptor to be open that was not at
// s (the other end's clean-up, a server closing its side of a connection,
// may lag behind), and fails tb with msg and what each such descriptor
// refers to if one stays. Unlike comparing counts, a late close of a
// descriptor from before s (an earlier test's) cannot make it fail or hide
// a leak.
func (s Snapshot) NoneAdded(tb testing.TB, msg string) {
	tb.Helper()
	s.noneAddedWithin(tb, 5*time.Second, msg)
}

func (s Snapshot) noneAddedWithin(tb testing.TB, wait time.Duration, msg string) {
	tb.Helper()
	var added []int
	var err error
	for deadline := time.Now().Add(wait); ; time.Sleep(5 * time.Millisecond) {
		if added, err = s.Added(); err == nil && len(added) == 0 {
			return
		}
		if time.Now().After(deadline) {
			break
		}
	}
	if err != nil {
		tb.Errorf("%s: %v", msg, err)
		return
	}
	what := make([]string, len(added))
	for i, fd := range added {
		target, _ := os.Readlink("/proc/self/fd/" + strconv.Itoa(fd))
		what[i] = strconv.Itoa(fd) + " -> " + target
	}
	tb.Errorf("%s: descriptors open that were not before: %s", msg, strings.Join(what, ", "))
}
