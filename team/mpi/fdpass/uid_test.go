//go:build linux

package fdpass

import (
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"net"
	"os"
	"os/exec"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/nvls-go/nvls/team/mpi/internal/fdtest"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// The child half of TestOtherUIDRefused: with NVLS_FDPASS_CHILD set, the
// test binary sends a descriptor to the socket it names, with the right
// token, and prints what happened.
const childEnv = "NVLS_FDPASS_CHILD"

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) != "" {
		os.Exit(childMain())
	}
	os.Exit(m.Run())
}

// rawChildEnv set (to anything) makes the child a raw client instead of
// Send: see rawChild.
const rawChildEnv = "NVLS_FDPASS_RAW"

func childMain() int {
	tok, err := hex.DecodeString(os.Getenv("NVLS_FDPASS_TOKEN"))
	if err != nil {
		fmt.Println("RESULT bad-token-env", err)
		return 2
	}
	if os.Getenv(rawChildEnv) != "" {
		return rawChild(os.Getenv(childEnv), tok)
	}
	r, w, err := os.Pipe()
	if err != nil {
		fmt.Println("RESULT pipe", err)
		return 2
	}
	defer r.Close()
	defer w.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	err = Send(ctx, os.Getenv(childEnv), tok, Envelope{From: 1, To: 0, Seq: 1}, int(w.Fd()))
	switch {
	case err == nil:
		fmt.Println("RESULT accepted")
	case errors.Is(err, ErrRefused):
		fmt.Println("RESULT refused:", err)
	case errors.Is(err, syscall.EACCES):
		fmt.Println("RESULT denied:", err)
	default:
		fmt.Println("RESULT other:", err)
	}
	return 0
}

// rawChild is a client that does not give up: it sends a valid hello
// (the job's token, rank 1 to rank 0, exchange 1, with a descriptor) and,
// without waiting for the answer, the descriptor message with the write
// end of a pipe; it closes its own copy of that end, prints every reply
// until the server closes the connection, and then whether the pipe's
// write end is still open anywhere (its read end sees EOF only once every
// copy is closed: the one in flight, and any the server took).
func rawChild(path string, tok []byte) int {
	probe, err := newLeakProbe()
	if err != nil {
		fmt.Println("RESULT pipe:", err)
		return 2
	}
	h := hello{From: 1, To: 0, Seq: 1, HasFD: true}
	copy(h.Token[:], tok)
	c, err := net.Dial("unix", path)
	if err != nil {
		fmt.Println("RESULT dial:", err)
		return 0
	}
	uc := c.(*net.UnixConn)
	defer uc.Close()
	uc.SetDeadline(time.Now().Add(5 * time.Second))
	if _, err := uc.Write(h.marshal()); err != nil {
		fmt.Println("SENT hello:", err)
	}
	if _, _, err := uc.WriteMsgUnix([]byte{0}, syscall.UnixRights(probe.w), nil); err != nil {
		fmt.Println("SENT descriptor:", err)
	}
	for {
		err := readStatus(uc)
		if err == nil {
			fmt.Println("REPLY ok")
			continue
		}
		if errors.Is(err, ErrRefused) {
			fmt.Println("REPLY refused:", err)
			continue
		}
		fmt.Println("ENDED", err)
		break
	}
	if probe.closedEverywhere(3 * time.Second) {
		fmt.Println("RESULT descriptor closed everywhere")
	} else {
		fmt.Println("RESULT descriptor still open somewhere")
	}
	return 0
}

// runAs runs this test binary as the child, under uid/gid 65534, with
// the extra environment variables env. It copies the binary where that
// uid can execute it.
func runAs(t *testing.T, exe, path string, token []byte, env ...string) string {
	t.Helper()
	cmd := exec.Command(exe)
	cmd.Env = append([]string{childEnv + "=" + path, "NVLS_FDPASS_TOKEN=" + hex.EncodeToString(token)}, env...)
	cmd.Dir = "/"
	cmd.SysProcAttr = &syscall.SysProcAttr{Credential: &syscall.Credential{Uid: 65534, Gid: 65534}}
	out, err := cmd.CombinedOutput()
	if err != nil && errors.Is(err, syscall.EPERM) {
		t.Skipf("cannot start a process as uid 65534 here: %v", err)
	}
	require.NoError(t, err, "child output: %s", out)
	return string(out)
}

// otherUIDJob skips unless this process is root; else it starts a job of
// two servers under a parent directory everyone may traverse (so that
// only a server's own directory stands in the way) and returns them, their
// log and a copy of this test binary that uid 65534 can run.
func otherUIDJob(t *testing.T) ([]*Server, *fdtest.LogBuf, string) {
	t.Helper()
	if os.Getuid() != 0 {
		t.Skip("needs root to start a process under another uid (uid 65534)")
	}
	parent, err := os.MkdirTemp("", "fdpass-uid-")
	require.NoError(t, err)
	t.Cleanup(func() { os.RemoveAll(parent) })
	require.NoError(t, os.Chmod(parent, 0o755))
	srvs, _, lb := newJob(t, 2, Config{Parent: parent})
	return srvs, lb, fdtest.CopyExecutable(t)
}

// A process of another uid cannot reach the socket through its private
// directory; and when the directory is opened up (as a test can), the
// server refuses it by SO_PEERCRED even though it holds the token.
func TestOtherUIDRefused(t *testing.T) {
	srvs, lb, exe := otherUIDJob(t)
	out := runAs(t, exe, srvs[0].Path(), srvs[0].token)
	assert.Contains(t, out, "RESULT denied:", "the 0700 directory keeps other users out")

	// Open the directory and the socket to everyone; the server still
	// refuses the other uid.
	require.NoError(t, os.Chmod(srvs[0].Dir(), 0o755))
	require.NoError(t, os.Chmod(srvs[0].Path(), 0o777))
	out = runAs(t, exe, srvs[0].Path(), srvs[0].token)
	// Both ends check: the child sees the server's uid is not its own,
	// the server refuses the child's uid (and logs it).
	assert.Contains(t, out, "RESULT refused:", "child output")
	assert.Contains(t, out, "runs as uid 0, not 65534")
	require.Eventually(t, func() bool { return strings.Contains(lb.String(), "peer_uid=65534") }, 5*time.Second, 10*time.Millisecond)
	logs := lb.String()
	assert.Contains(t, logs, "refused connection")
	assert.Contains(t, logs, "peer uid 65534 is not this job's uid 0")

	ctx, cancel := context.WithTimeout(context.Background(), 50*time.Millisecond)
	defer cancel()
	_, err := srvs[0].Collect(ctx, 1, []int{1})
	var me *MissingError
	assert.ErrorAs(t, err, &me, "nothing was taken from the other uid")
}

// A client of another uid that holds the token and goes on regardless: a
// valid hello and, right behind it, a descriptor. The server refuses it by
// SO_PEERCRED before reading anything (one refusal, never an "ok"), takes
// no descriptor (Collect finds none, this process holds no new
// descriptor) and the one in flight is closed with the connection (the
// child's pipe sees EOF).
func TestOtherUIDRawHelloRefused(t *testing.T) {
	srvs, lb, exe := otherUIDJob(t)
	require.NoError(t, os.Chmod(srvs[0].Dir(), 0o755))
	require.NoError(t, os.Chmod(srvs[0].Path(), 0o777))
	base, err := fdtest.Take()
	require.NoError(t, err)

	out := runAs(t, exe, srvs[0].Path(), srvs[0].token, rawChildEnv+"=1")
	t.Logf("child:\n%s", out)
	assert.Equal(t, 1, strings.Count(out, "REPLY refused:"), "one refusal")
	assert.Contains(t, out, "peer uid 65534 is not this job's uid 0")
	assert.NotContains(t, out, "REPLY ok", "the server went on after refusing")
	assert.Contains(t, out, "RESULT descriptor closed everywhere")
	require.Eventually(t, func() bool { return strings.Contains(lb.String(), "peer_uid=65534") }, 5*time.Second, 10*time.Millisecond)

	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	got, err := srvs[0].Collect(ctx, 1, []int{1})
	for _, fd := range got {
		if fd >= 0 {
			syscall.Close(fd)
		}
	}
	var me *MissingError
	assert.ErrorAs(t, err, &me, "a descriptor of the other uid was accepted")
	base.NoneAdded(t, "open descriptors before and after")
}
