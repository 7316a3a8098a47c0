//go:build mpi

package mpi

import (
	"bytes"
	"context"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"log/slog"
	"os"
	"os/exec"
	"syscall"
	"testing"
	"time"

	"github.com/nvls-go/nvls/team/mpi/fdpass"
	"github.com/nvls-go/nvls/team/mpi/internal/fdtest"
	"github.com/stretchr/testify/require"
)

// The multi-rank tests run when the test binary runs under mpirun:
//
//	CGO_ENABLED=1 go test -c -tags mpi -o mpi.test ./team/mpi
//	mpirun --allow-run-as-root --oversubscribe -np 4 ./mpi.test
//
// Run plainly, the binary runs the single-process tests and skips the
// multi-rank ones with a message.

// world is the shared Bootstrap of the multi-rank tests (nil when not
// under a launcher); worldLog collects its log lines.
var (
	world    *Bootstrap
	worldLog = &fdtest.LogBuf{}
)

// childEnv makes the test binary a client that sends a descriptor to the
// socket it names and prints what happened (see childMain).
const childEnv = "NVLS_MPI_TEST_CHILD"

func TestMain(m *testing.M) {
	if os.Getenv(childEnv) != "" {
		os.Exit(childMain())
	}
	if !UnderLauncher() {
		os.Exit(m.Run())
	}
	ctx, cancel := context.WithTimeout(context.Background(), 60*time.Second)
	var err error
	world, err = New(ctx, WithLogger(slog.New(slog.NewTextHandler(io.MultiWriter(worldLog), &slog.HandlerOptions{Level: slog.LevelDebug}))))
	cancel()
	if err != nil {
		fmt.Fprintln(os.Stderr, "mpi test: New:", err)
		os.Exit(2)
	}
	code := m.Run()
	if err := world.Close(); err != nil {
		fmt.Fprintln(os.Stderr, "mpi test: Close:", err)
		code = max(code, 1)
	}
	os.Exit(code)
}

// needWorld skips a multi-rank test when not under mpirun.
func needWorld(t *testing.T, minRanks int) *Bootstrap {
	t.Helper()
	if world == nil {
		t.Skip("multi-rank test: not under an MPI launcher; run the binary with mpirun --allow-run-as-root --oversubscribe -np 4")
	}
	if world.Size() < minRanks {
		t.Skipf("needs at least %d ranks, have %d", minRanks, world.Size())
	}
	return world
}

func tctx(t *testing.T, d time.Duration) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), d)
	t.Cleanup(cancel)
	return ctx
}

func childMain() int {
	tok, err := hex.DecodeString(os.Getenv("NVLS_MPI_TEST_TOKEN"))
	if err != nil || len(tok) != fdpass.TokenSize {
		// No token given: a process without it makes one up.
		tok, _ = fdpass.NewToken()
	}
	fd, err := fdtest.Memfd("child", []byte("not for you"))
	if err != nil {
		fmt.Println("RESULT memfd:", err)
		return 2
	}
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	var to, from int
	fmt.Sscan(os.Getenv("NVLS_MPI_TEST_TO"), &to)
	if to == 0 {
		from = 1
	}
	err = fdpass.Send(ctx, os.Getenv(childEnv), tok, fdpass.Envelope{From: from, To: to, Seq: 1 << 40}, fd)
	switch {
	case err == nil:
		fmt.Println("RESULT accepted")
	case errors.Is(err, fdpass.ErrRefused):
		fmt.Println("RESULT refused:", err)
	case errors.Is(err, syscall.EACCES):
		fmt.Println("RESULT denied:", err)
	default:
		fmt.Println("RESULT other:", err)
	}
	return 0
}

// runChild runs this binary as a descriptor client against path; cred
// (optional) sets its uid and gid. skipped is true when the system would
// not start the process under cred.
func runChild(t *testing.T, exe, path string, to int, token []byte, cred *syscall.Credential) (out string, pid int, skipped bool) {
	t.Helper()
	cmd := exec.Command(exe)
	cmd.Env = []string{childEnv + "=" + path, fmt.Sprintf("NVLS_MPI_TEST_TO=%d", to)}
	if token != nil {
		cmd.Env = append(cmd.Env, "NVLS_MPI_TEST_TOKEN="+hex.EncodeToString(token))
	}
	cmd.Dir = "/"
	if cred != nil {
		cmd.SysProcAttr = &syscall.SysProcAttr{Credential: cred}
	}
	var buf bytes.Buffer
	cmd.Stdout, cmd.Stderr = &buf, &buf
	if err := cmd.Start(); err != nil {
		if errors.Is(err, syscall.EPERM) || errors.Is(err, syscall.EACCES) {
			return err.Error(), 0, true
		}
		require.NoError(t, err)
	}
	pid = cmd.Process.Pid
	require.NoError(t, cmd.Wait(), "child output: %s", buf.String())
	return buf.String(), pid, false
}
