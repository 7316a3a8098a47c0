package collectives

import (
	"errors"
	"fmt"
	"strings"
	"time"

	"github.com/nvls-go/nvls/cuda"
	"github.com/nvls-go/nvls/internal/kabi"
	"github.com/nvls-go/nvls/kernels"
	"github.com/nvls-go/nvls/team"
)

var (
	// ErrInvalid matches every argument error (*ArgError) and the parse
	// errors of ParseDType and ParseOp. It is kernels.ErrInvalid, the one
	// sentinel of the vocabulary's parse errors too.
	ErrInvalid = kernels.ErrInvalid
	// ErrClosed: the Comm was closed.
	ErrClosed = errors.New("collectives: closed")
	// ErrTimeout matches a *TimeoutError: a kernel's barrier wait ran out
	// of time (a peer did not arrive); and an *AbortError, a kernel that
	// gave up on finding such a failure.
	ErrTimeout = errors.New("collectives: timed out waiting for peers")
	// ErrAborted matches an *AbortError: a kernel gave up at once because
	// another rank's kernel had failed first.
	ErrAborted = errors.New("collectives: gave up: another rank had failed")
	// ErrBadEnv matches a *team.EnvError, the one error type of every
	// variable of nvls; it is team.ErrBadEnv.
	ErrBadEnv = team.ErrBadEnv
	// ErrConfigMismatch matches a *ConfigMismatchError: the ranks of a
	// team resolved different configurations in New. Such an error
	// matches ErrInvalid too.
	ErrConfigMismatch = errors.New("collectives: configuration differs between ranks")
	// ErrArgMismatch matches a *MismatchError, a collective whose ranks
	// called it with different arguments (count, element type, operator,
	// root or the collective itself), and an *AbortError of a rank that
	// gave up because another found that.
	ErrArgMismatch = errors.New("collectives: the ranks called the collective with different arguments")
)

// ConfigMismatchError is what New returns, on every rank, when the ranks
// of the team resolved different configurations (options, environment
// variables, or the kernels loaded): the algorithm, the grid and the
// number of launches of every collective must be the same on every rank,
// or the kernels wait for each other until their timeout. It matches
// ErrConfigMismatch and ErrInvalid.
type ConfigMismatchError struct {
	// Settings are the settings that differ, in a fixed order.
	Settings []SettingMismatch
}

// SettingMismatch is one setting that differs, with every rank's value.
type SettingMismatch struct {
	// Setting is the setting: "kernel flavor", "LL max", "one-shot
	// max", "max grid", "timeout" or "stage bytes".
	Setting string
	// Values are every rank's, indexed by rank.
	Values []RankValue
}

// RankValue is a rank's value of a setting, as it would have run with.
type RankValue struct {
	Rank int
	// Value is the value in effect, e.g. "65536 bytes", "66 blocks
	// (clamped from 132)", "10s".
	Value string
	// Source is where it came from: "option WithLLMax", "env
	// NVLS_LL_MAX" or "default".
	Source string
}

func (e *ConfigMismatchError) Error() string {
	var b strings.Builder
	b.WriteString("collectives: New: the ranks resolved different configurations (every process of a team must pass the same options and set the same NVLS_* variables): ")
	for i, s := range e.Settings {
		if i > 0 {
			b.WriteString("; ")
		}
		b.WriteString(s.Setting)
		b.WriteString(": ")
		// Ranks with the same value from the same source together, in
		// the order of their first rank.
		type group struct {
			v     RankValue
			ranks []int
		}
		var groups []group
	next:
		for _, v := range s.Values {
			for g := range groups {
				if groups[g].v.Value == v.Value && groups[g].v.Source == v.Source {
					groups[g].ranks = append(groups[g].ranks, v.Rank)
					continue next
				}
			}
			groups = append(groups, group{v: v, ranks: []int{v.Rank}})
		}
		for j, g := range groups {
			if j > 0 {
				b.WriteString(" vs ")
			}
			word := "rank"
			if len(g.ranks) > 1 {
				word = "ranks"
			}
			fmt.Fprintf(&b, "%s (%s) on %s %s", g.v.Value, g.v.Source, word, joinInts(g.ranks))
		}
	}
	return b.String()
}

// Unwrap makes errors.Is(err, ErrConfigMismatch) and errors.Is(err,
// ErrInvalid) hold.
func (e *ConfigMismatchError) Unwrap() []error { return []error{ErrConfigMismatch, ErrInvalid} }

// ArgError is an argument of a call that is wrong: which call, which
// argument, on which rank, and why. It matches ErrInvalid, and the error
// it wraps where there is one (a *kernels.UnsupportedError, a driver
// error from cuPointerGetAttribute).
type ArgError struct {
	// Op is the call: "AllReduce", "Broadcast", "Barrier", "Sync".
	Op string
	// Arg names the argument, e.g. "send[1]", "count", "dtype/op".
	Arg string
	// Rank is the team rank the argument belongs to, or -1.
	Rank int
	// Msg says what is wrong.
	Msg string
	// Err is the underlying error, or nil.
	Err error
}

func (e *ArgError) Error() string {
	var b strings.Builder
	b.WriteString("collectives: ")
	b.WriteString(e.Op)
	b.WriteString(": ")
	b.WriteString(e.Arg)
	if e.Rank >= 0 {
		fmt.Fprintf(&b, " (rank %d)", e.Rank)
	}
	if e.Msg != "" {
		b.WriteString(": ")
		b.WriteString(e.Msg)
	}
	if e.Err != nil {
		b.WriteString(": ")
		b.WriteString(e.Err.Error())
	}
	return b.String()
}

// Unwrap makes errors.Is(err, ErrInvalid) hold, and exposes Err.
func (e *ArgError) Unwrap() []error {
	if e.Err == nil {
		return []error{ErrInvalid}
	}
	return []error{ErrInvalid, e.Err}
}

func argErr(op, arg string, rank int, format string, args ...any) *ArgError {
	return &ArgError{Op: op, Arg: arg, Rank: rank, Msg: fmt.Sprintf(format, args...)}
}

// TimeoutError is a status word a kernel left on a rank: its wait in a
// barrier ran out of time, because a peer did not arrive (it never
// launched the collective, launched another one, or died).
type TimeoutError struct {
	// Op names the operation that timed out ("all-reduce", "broadcast",
	// "barrier"), from the status word's opcode.
	Op     string
	Opcode uint32
	// Rank and Device are the rank that waited and its device.
	Rank   int
	Device cuda.Device
	// Phase is the barrier phase (0: start of the collective, 1: end; 2:
	// the push broadcast's wait for the root's data) and Block the block
	// whose wait expired.
	Phase, Block uint32
	// Status is the raw status word.
	Status uint64
	// Deadline is the barrier deadline and where it came from, as the
	// message names it: "NVLS_TIMEOUT=1ns", "WithTimeout(5s)" or the
	// default's; empty where not known.
	Deadline string
}

func (e *TimeoutError) Error() string {
	if !(kabi.Status{Word: e.Status}).TimedOut() {
		return fmt.Sprintf("collectives: rank %d (device %d): kernel status %#x", e.Rank, e.Device, e.Status)
	}
	where := (kabi.Status{Word: e.Status}).Where() // "waiting for the root's data" in PhasePush
	if e.Phase != kabi.PhasePush {
		where = "waiting for peers " + where
	}
	s := fmt.Sprintf("collectives: %s (opcode %d) on rank %d (device %d): timed out %s (block %d)",
		e.Op, e.Opcode, e.Rank, e.Device, where, e.Block)
	if e.Deadline != "" {
		s += ": the barrier deadline " + e.Deadline + " expired"
	}
	return s
}

// Is makes errors.Is(err, ErrTimeout) hold.
func (e *TimeoutError) Is(target error) bool { return target == ErrTimeout }

// PhaseEntry is AbortError.Phase of a kernel that gave up at entry,
// before any barrier wait (the kernel ABI's own value).
const PhaseEntry = 255

var (
	_ [PhaseEntry - kabi.PhaseEntry]struct{}
	_ [kabi.PhaseEntry - PhaseEntry]struct{}
)

// AbortError is a status word a kernel left on a rank when it gave up
// without waiting out its own timeout, because the team had failed: a
// kernel of FailedRank timed out first and marked the team failed on
// every rank, and whatever was queued behind that (collectives, graph
// replays) returns at once. It matches ErrAborted and ErrTimeout.
type AbortError struct {
	// Op names the operation that gave up; Opcode is its status opcode.
	Op     string
	Opcode uint32
	// Rank and Device are the rank that gave up and its device.
	Rank   int
	Device cuda.Device
	// Phase is the barrier phase it was waiting in (0, 1; LL: 0), or
	// PhaseEntry when it gave up at entry; Block the block.
	Phase, Block uint32
	// FailedRank is the rank whose failure it found.
	FailedRank int
	// Status is the raw status word.
	Status uint64
	// Deadline is the barrier deadline, as TimeoutError's: the ranks of a
	// Comm agree on its value (New), so it is the one FailedRank ran out
	// of.
	Deadline string
}

func (e *AbortError) Error() string {
	s := kabi.Status{Word: e.Status}
	head := fmt.Sprintf("collectives: %s (opcode %d) on rank %d (device %d): gave up %s (block %d)",
		e.Op, e.Opcode, e.Rank, e.Device, s.Where(), e.Block)
	switch {
	case e.mismatch():
		return fmt.Sprintf("%s: rank %d found that the ranks called it with different arguments (its error names them)", head, e.FailedRank)
	case e.Deadline != "":
		return fmt.Sprintf("%s: the barrier deadline %s expired on rank %d first", head, e.Deadline, e.FailedRank)
	}
	return fmt.Sprintf("%s: rank %d had failed first", head, e.FailedRank)
}

// mismatch: the failure it found was a mismatch of arguments.
func (e *AbortError) mismatch() bool {
	return (kabi.Status{Word: e.Status}).FoundKind() == kabi.StatusMismatch
}

// Is makes errors.Is(err, ErrAborted) hold, and errors.Is(err,
// ErrTimeout) or errors.Is(err, ErrArgMismatch) by the kind of failure
// it found.
func (e *AbortError) Is(target error) bool {
	if e.mismatch() {
		return target == ErrAborted || target == ErrArgMismatch
	}
	return target == ErrAborted || target == ErrTimeout
}

// MismatchError is a collective whose ranks called it with different
// arguments, found by its kernels before any data moved (every rank's
// start barrier compares what each rank passed; the LL kernels compare
// the check each line carries). Every rank that saw it reports one, and
// the team is marked failed: the ranks' streams are out of step.
type MismatchError struct {
	// Op names the collective as this rank called it.
	Op string
	// Rank and Device are the rank that found it and its device.
	Rank   int
	Device cuda.Device
	// Args are every rank's arguments as the kernel saw them (index =
	// team rank); Seen[r] is false where rank r's were not seen (an LL
	// kernel sees only its own and the first rank that differs).
	Args []kernels.Args
	Seen []bool
	// Differs says which arguments differ and which ranks hold which
	// value.
	Differs string
}

func (e *MismatchError) Error() string {
	return fmt.Sprintf("collectives: %s on rank %d (device %d): the ranks called it with different arguments: %s",
		e.Op, e.Rank, e.Device, e.Differs)
}

// Is makes errors.Is(err, ErrArgMismatch) hold.
func (e *MismatchError) Is(target error) bool { return target == ErrArgMismatch }

// statusError is the error of a non-zero status word: a *MismatchError
// (diag: the arrival words the kernel left beside it), an *AbortError, or
// a *TimeoutError (which also describes a word of an unknown kind).
// deadline is the config's, the kernels' barrier deadline named.
func statusError(rank int, dev cuda.Device, word uint64, deadline string, diag []uint64) error {
	s := kabi.Status{Word: word}
	if s.Mismatch() {
		e := &MismatchError{Op: kernels.OpName(s.Opcode()), Rank: rank, Device: dev, Differs: kabi.DescribeMismatch(diag),
			Args: make([]kernels.Args, len(diag)), Seen: make([]bool, len(diag))}
		for r, w := range diag {
			e.Args[r], e.Seen[r] = kabi.DecodeWord(w)
		}
		return e
	}
	if s.Aborted() {
		return &AbortError{Op: kernels.OpName(s.Opcode()), Opcode: s.Opcode(), Rank: rank, Device: dev,
			Phase: s.Phase(), Block: s.Block(), FailedRank: s.FailedRank(), Status: word, Deadline: deadline}
	}
	return &TimeoutError{Op: kernels.OpName(s.Opcode()), Opcode: s.Opcode(), Rank: rank, Device: dev,
		Phase: s.Phase(), Block: s.Block(), Status: word, Deadline: deadline}
}

// DeadlineError is a Sync whose deadline passed while streams still had
// work, with no kernel reporting a timeout (yet). The team is not marked
// broken: the work may just be long; Sync can be called again.
type DeadlineError struct {
	// Ranks are the team ranks whose streams were still busy.
	Ranks []int
	// Waited is how long Sync waited.
	Waited time.Duration
	// Err is the context's error (context.DeadlineExceeded or
	// context.Canceled).
	Err error
}

func (e *DeadlineError) Error() string {
	what := "the streams of " + ranksText(e.Ranks)
	if len(e.Ranks) == 1 {
		what = "the stream of " + ranksText(e.Ranks)
	}
	return fmt.Sprintf("collectives: sync: %s still had work after %v (no kernel reported a timeout): %v",
		what, roundWait(e.Waited), e.Err)
}

// Unwrap exposes the context's error.
func (e *DeadlineError) Unwrap() error { return e.Err }

// ranksText is "rank 3" or "ranks 1, 3".
func ranksText(ranks []int) string {
	if len(ranks) == 1 {
		return "rank " + joinInts(ranks)
	}
	return "ranks " + joinInts(ranks)
}

// pronoun is "it" for one rank, "them" for more.
func pronoun(ranks []int) string {
	if len(ranks) == 1 {
		return "it"
	}
	return "them"
}

// roundWait rounds d to three significant digits (at least to the
// nanosecond), so that a short wait reads as 152µs, not 0s.
func roundWait(d time.Duration) time.Duration {
	for u := time.Duration(1); u < time.Second; u *= 10 {
		if d < 1000*u {
			return d.Round(u)
		}
	}
	return d.Round(time.Second)
}

func joinInts(v []int) string {
	var b strings.Builder
	for i, x := range v {
		if i > 0 {
			b.WriteString(", ")
		}
		fmt.Fprint(&b, x)
	}
	return b.String()
}
