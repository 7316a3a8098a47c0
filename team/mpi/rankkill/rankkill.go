//go:build mpi

package rankkill

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strconv"
	"strings"
	"syscall"
	"time"

	"github.com/nvls-go/nvls/team"
)

// deathFile is the file in Plan.Dir where the victim writes the moment
// it dies (Unix nanoseconds, decimal).
const deathFile = "killed-at"

// Plan is what every rank agrees on before the loop.
type Plan struct {
	// Victim is the rank that kills itself.
	Victim int `json:"victim"`
	// After is the number of iterations every rank completes before the
	// victim dies (at the start of iteration After).
	After int `json:"after"`
	// Dir is a directory on this host (made by rank 0) where the victim
	// writes the moment it dies, so that the survivors can time their
	// errors from it (one host, one clock).
	Dir string `json:"dir"`

	// die replaces Die in Run (tests in one process stop the victim's
	// goroutine instead of killing the process).
	die func()
	// last, when set, is what the victim does at iteration After just
	// before it dies (e.g. launch a graph and not wait for it), so that it
	// dies with its work in flight.
	last func(i int)
}

// ErrVictim is what Run returns on the victim when it did not die: only
// when a test replaced the death by something that returns.
var ErrVictim = errors.New("rankkill: this rank is the victim")

// Agree hands rank 0's plan to every rank: rank 0 makes Dir (a new
// directory under parent, "" for the system's temporary directory) and
// all-gathers the plan through boot. Every rank must call it. The caller
// of rank 0 removes Dir when done (Cleanup).
func Agree(ctx context.Context, boot team.Bootstrap, victim, after int, parent string) (Plan, error) {
	if victim < 0 || victim >= boot.Size() {
		return Plan{}, fmt.Errorf("rankkill: victim %d out of range (0 to %d)", victim, boot.Size()-1)
	}
	if victim == 0 {
		// Rank 0 answers every bootstrap collective: its death would test
		// the leaves' "no answer from rank 0" path, a different test.
		return Plan{}, errors.New("rankkill: the victim must not be rank 0")
	}
	if after < 1 {
		return Plan{}, fmt.Errorf("rankkill: after %d: the victim must complete at least one iteration", after)
	}
	var mine []byte
	if boot.Rank() == 0 {
		dir, err := os.MkdirTemp(parent, "nvls-rankkill-")
		if err != nil {
			return Plan{}, fmt.Errorf("rankkill: %w", err)
		}
		mine, err = json.Marshal(Plan{Victim: victim, After: after, Dir: dir})
		if err != nil {
			return Plan{}, fmt.Errorf("rankkill: %w", err)
		}
	}
	all, err := boot.AllGather(ctx, mine)
	if err != nil {
		return Plan{}, fmt.Errorf("rankkill: agreeing on the plan: %w", err)
	}
	var p Plan
	if err := json.Unmarshal(all[0], &p); err != nil {
		return Plan{}, fmt.Errorf("rankkill: rank 0's plan: %w", err)
	}
	if p.Victim != victim || p.After != after {
		return Plan{}, fmt.Errorf("rankkill: rank 0 plans victim %d after %d, this rank %d after %d", p.Victim, p.After, victim, after)
	}
	return p, nil
}

// Die records the moment of death in Dir and kills this process with
// SIGKILL: no deferred function runs, nothing is closed or finalized,
// as when a process is killed from outside. It does not return.
func (p Plan) Die() {
	if err := p.record(time.Now()); err != nil {
		fmt.Fprintf(os.Stderr, "%v\n", err)
	}
	_ = syscall.Kill(os.Getpid(), syscall.SIGKILL)
	select {} // the signal is on its way
}

// record writes the moment of death into Dir.
func (p Plan) record(at time.Time) error {
	path := filepath.Join(p.Dir, deathFile)
	f, err := os.OpenFile(path, os.O_WRONLY|os.O_CREATE|os.O_EXCL, 0o600)
	if err == nil {
		_, err = f.WriteString(strconv.FormatInt(at.UnixNano(), 10) + "\n")
		err = errors.Join(err, f.Sync(), f.Close())
	}
	if err != nil {
		return fmt.Errorf("rankkill: recording the time of death: %w", err)
	}
	return nil
}

// KilledAt is the moment the victim recorded before it died. It waits up
// to timeout for the record to appear.
func (p Plan) KilledAt(timeout time.Duration) (time.Time, error) {
	path := filepath.Join(p.Dir, deathFile)
	end := time.Now().Add(timeout)
	for {
		b, err := os.ReadFile(path)
		if err == nil && strings.HasSuffix(string(b), "\n") {
			ns, perr := strconv.ParseInt(strings.TrimSpace(string(b)), 10, 64)
			if perr != nil {
				return time.Time{}, fmt.Errorf("rankkill: %s: %w", path, perr)
			}
			return time.Unix(0, ns), nil
		}
		if err != nil && !errors.Is(err, os.ErrNotExist) {
			return time.Time{}, fmt.Errorf("rankkill: %w", err)
		}
		if time.Now().After(end) {
			return time.Time{}, fmt.Errorf("rankkill: no record of the victim's death in %s after %v", p.Dir, timeout)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// Meet is a barrier of the survivors of size ranks through Dir (after the
// kill they cannot meet through MPI: every collective includes the dead
// rank): it marks this rank's arrival at stage (a plain name) and waits up
// to timeout for every survivor to arrive, naming those that did not.
func (p Plan) Meet(stage string, rank, size int, timeout time.Duration) error {
	if err := p.mark(stage, rank); err != nil {
		return err
	}
	return p.waitFor(stage, size, timeout)
}

// Finish ends a survivor's use of Dir: it marks this rank done, and on
// rank 0 it waits (up to timeout) until every survivor of size ranks has
// marked itself done, then removes Dir.
func (p Plan) Finish(rank, size int, timeout time.Duration) error {
	if err := p.mark("done", rank); err != nil {
		return err
	}
	if rank != 0 {
		return nil
	}
	err := p.waitFor("done", size, timeout)
	return errors.Join(err, os.RemoveAll(p.Dir))
}

func (p Plan) mark(stage string, rank int) error {
	if err := os.WriteFile(filepath.Join(p.Dir, fmt.Sprintf("%s-%d", stage, rank)), nil, 0o600); err != nil {
		return fmt.Errorf("rankkill: %w", err)
	}
	return nil
}

// waitFor waits until every survivor has marked stage.
func (p Plan) waitFor(stage string, size int, timeout time.Duration) error {
	end := time.Now().Add(timeout)
	var waiting []int
	for {
		waiting = waiting[:0]
		for r := range size {
			if r == p.Victim {
				continue
			}
			if _, err := os.Stat(filepath.Join(p.Dir, fmt.Sprintf("%s-%d", stage, r))); err != nil {
				waiting = append(waiting, r)
			}
		}
		if len(waiting) == 0 {
			return nil
		}
		if time.Now().After(end) {
			return fmt.Errorf("rankkill: rank(s) %v did not reach %q within %v", waiting, stage, timeout)
		}
		time.Sleep(5 * time.Millisecond)
	}
}

// Outcome is how the loop ended on one survivor.
type Outcome struct {
	Rank int
	// Iterations is the number of steps that succeeded.
	Iterations int
	// Err is the error that ended the loop (nil only if ctx ended it
	// between steps, which Run reports as an error too).
	Err error
	// ErrAt is when the failing step returned.
	ErrAt time.Time
	// KilledAt is the victim's recorded moment of death (zero if it could
	// not be read; KillErr says why).
	KilledAt time.Time
	KillErr  error
}

// SinceKill is the time from the victim's death to this rank's error.
func (o Outcome) SinceKill() time.Duration { return o.ErrAt.Sub(o.KilledAt) }

// String is the outcome in one line.
func (o Outcome) String() string {
	if o.KillErr != nil {
		return fmt.Sprintf("rank %d: %d iterations, then: %v (time of death unknown: %v)", o.Rank, o.Iterations, o.Err, o.KillErr)
	}
	return fmt.Sprintf("rank %d: %d iterations, error %v after the kill: %v", o.Rank, o.Iterations, o.SinceKill().Round(time.Millisecond), o.Err)
}

// Run runs step(ctx, i) for i = 0, 1, ... until a step fails or ctx
// ends. On the victim, iteration After does not run: the process dies
// instead (Die), after what the test set to run last (a launch left in
// flight). On a survivor, Run returns the Outcome, with the time of
// death read from Dir (waiting up to 10 s for it).
func (p Plan) Run(ctx context.Context, rank int, step func(ctx context.Context, i int) error) Outcome {
	o := Outcome{Rank: rank}
	for i := 0; ; i++ {
		if rank == p.Victim && i == p.After {
			if p.last != nil {
				p.last(i)
			}
			if p.die == nil {
				p.Die()
			}
			p.die()
			return Outcome{Rank: rank, Iterations: i, Err: ErrVictim, ErrAt: time.Now()}
		}
		if err := ctx.Err(); err != nil {
			o.Err, o.ErrAt = fmt.Errorf("rankkill: rank %d: before iteration %d: %w", rank, i, err), time.Now()
			break
		}
		if err := step(ctx, i); err != nil {
			o.Err, o.ErrAt = err, time.Now()
			break
		}
		o.Iterations++
	}
	o.KilledAt, o.KillErr = p.KilledAt(10 * time.Second)
	return o
}
