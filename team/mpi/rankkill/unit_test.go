//go:build mpi

package rankkill

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/nvls-go/nvls/team"
	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// agreeAll runs Agree on n in-process ranks.
func agreeAll(t *testing.T, n, victim, after int, parent string) ([]Plan, []error) {
	t.Helper()
	boots := team.NewInProcess(n)
	plans := make([]Plan, n)
	errs := make([]error, n)
	var wg sync.WaitGroup
	for r, b := range boots {
		wg.Go(func() {
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			plans[r], errs[r] = Agree(ctx, b, victim, after, parent)
		})
	}
	wg.Wait()
	for _, b := range boots {
		require.NoError(t, b.Close())
	}
	return plans, errs
}

func TestAgree(t *testing.T) {
	parent := t.TempDir()
	plans, errs := agreeAll(t, 4, 3, 17, parent)
	for r := range plans {
		require.NoError(t, errs[r], "rank %d", r)
		assert.Equal(t, plans[0], plans[r], "rank %d's plan", r)
	}
	assert.Equal(t, 3, plans[0].Victim)
	assert.Equal(t, 17, plans[0].After)
	assert.Equal(t, parent, filepath.Dir(plans[0].Dir))
	fi, err := os.Stat(plans[0].Dir)
	require.NoError(t, err)
	assert.True(t, fi.IsDir())

	for _, bad := range []struct{ victim, after int }{{0, 5}, {4, 5}, {-1, 5}, {2, 0}} {
		_, errs := agreeAll(t, 4, bad.victim, bad.after, parent)
		for r, err := range errs {
			assert.Error(t, err, "victim %d after %d, rank %d", bad.victim, bad.after, r)
		}
	}
}

// die runs this test binary as a victim that records its death in dir and
// kills itself; it returns the window in which that happened.
func die(t *testing.T, dir string) (start, end time.Time) {
	t.Helper()
	exe, err := os.Executable()
	require.NoError(t, err)
	cmd := exec.Command(exe, "-test.run", "^$")
	cmd.Env = append(os.Environ(), childEnv+"="+dir)
	start = time.Now()
	err = cmd.Run()
	end = time.Now()
	var ee *exec.ExitError
	require.ErrorAs(t, err, &ee, "the victim must not exit normally")
	ws, ok := ee.Sys().(syscall.WaitStatus)
	require.True(t, ok)
	require.True(t, ws.Signaled(), "killed by a signal")
	assert.Equal(t, syscall.SIGKILL, ws.Signal())
	return start, end
}

func TestDieAndKilledAt(t *testing.T) {
	dir := t.TempDir()
	p := Plan{Victim: 1, After: 3, Dir: dir}
	_, err := p.KilledAt(30 * time.Millisecond)
	assert.ErrorContains(t, err, "no record of the victim's death")

	start, end := die(t, dir)
	at, err := p.KilledAt(time.Second)
	require.NoError(t, err)
	assert.False(t, at.Before(start.Truncate(time.Microsecond)), "recorded %v, started %v", at, start)
	assert.False(t, at.After(end), "recorded %v, ended %v", at, end)
}

// A survivor's loop: steps succeed until one fails; the outcome times the
// failure from the victim's recorded death.
func TestRunSurvivor(t *testing.T) {
	dir := t.TempDir()
	p := Plan{Victim: 2, After: 7, Dir: dir}
	_, end := die(t, dir)
	boom := errors.New("peer gone")
	var seen []int
	o := p.Run(context.Background(), 1, func(ctx context.Context, i int) error {
		seen = append(seen, i)
		if i == 7 {
			time.Sleep(20 * time.Millisecond)
			return boom
		}
		return nil
	})
	assert.Equal(t, []int{0, 1, 2, 3, 4, 5, 6, 7}, seen)
	assert.Equal(t, 7, o.Iterations)
	assert.ErrorIs(t, o.Err, boom)
	require.NoError(t, o.KillErr)
	assert.GreaterOrEqual(t, o.SinceKill(), 20*time.Millisecond)
	assert.Less(t, o.SinceKill(), time.Since(end)+time.Second)
	assert.Contains(t, o.String(), "rank 1: 7 iterations, error ")
	assert.Contains(t, o.String(), "after the kill: peer gone")

	// A context that ends between steps ends the loop with its error.
	ctx, cancel := context.WithCancel(context.Background())
	o = p.Run(ctx, 0, func(ctx context.Context, i int) error {
		if i == 2 {
			cancel()
		}
		return nil
	})
	assert.Equal(t, 3, o.Iterations)
	assert.ErrorIs(t, o.Err, context.Canceled)
}

func TestFinish(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "plan")
	require.NoError(t, os.Mkdir(dir, 0o700))
	p := Plan{Victim: 2, After: 1, Dir: dir}
	done := make(chan error)
	go func() { done <- p.Finish(0, 4, 10*time.Second) }()
	time.Sleep(30 * time.Millisecond)
	require.NoError(t, p.Finish(1, 4, time.Second))
	_, err := os.Stat(dir)
	require.NoError(t, err, "rank 0 waits for rank 3")
	require.NoError(t, p.Finish(3, 4, time.Second))
	require.NoError(t, <-done)
	_, err = os.Stat(dir)
	assert.ErrorIs(t, err, os.ErrNotExist, "rank 0 removed the directory")

	// A survivor that never finishes is named.
	require.NoError(t, os.Mkdir(dir, 0o700))
	err = p.Finish(0, 4, 50*time.Millisecond)
	assert.ErrorContains(t, err, `rank(s) [1 3] did not reach "done"`)
	_, serr := os.Stat(dir)
	assert.ErrorIs(t, serr, os.ErrNotExist)
}

// Meet waits for every survivor, the victim left out, and names the late.
func TestMeet(t *testing.T) {
	p := Plan{Victim: 1, After: 1, Dir: t.TempDir()}
	var wg sync.WaitGroup
	errs := make([]error, 4)
	for _, r := range []int{0, 2, 3} {
		wg.Go(func() {
			time.Sleep(time.Duration(r) * 20 * time.Millisecond)
			errs[r] = p.Meet("closed", r, 4, 10*time.Second)
		})
	}
	wg.Wait()
	for r, err := range errs {
		assert.NoError(t, err, "rank %d", r)
	}
	err := p.Meet("again", 0, 4, 50*time.Millisecond)
	assert.ErrorContains(t, err, `rank(s) [2 3] did not reach "again"`)
}
