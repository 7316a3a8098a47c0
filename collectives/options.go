package collectives

import (
	"fmt"
	"math"
	"slices"
	"time"

	"github.com/nvls-go/nvls/internal/env"
	"github.com/nvls-go/nvls/internal/kabi"
	"github.com/nvls-go/nvls/team"
)

// Environment variables New reads, as every variable of nvls is read
// (empty or blank is unset). Options win over them; a bad value is an
// error (a *team.EnvError naming the variable, its value and what it
// accepts) even where an option makes the variable moot.
const (
	// EnvOneShotMax is the largest all-reduce, in bytes, that runs the
	// one-shot kernel: a whole number with an optional unit K, M, G or T
	// (powers of 1024; KiB, KB and B also), e.g. 256K.
	EnvOneShotMax = env.OneShotMax
	// EnvLLMax is the largest all-reduce, in bytes, that runs the LL
	// (low-latency) kernel; same syntax as NVLS_ONESHOT_MAX; 0 turns LL
	// off.
	EnvLLMax = env.LLMax
	// EnvGrid is the largest grid (blocks per kernel): an integer from 1 to
	// 256 (DefaultMaxGrid, the kernels' barrier slots). The grid is also never more than the team's SM
	// count, divided by the ranks that share a device where they do (see
	// WithMaxGrid).
	EnvGrid = env.Grid
	// EnvMinGrid is the grid a launch spreads its vectors over, one a
	// thread, before its threads take more: an integer from 0 to 256
	// (see WithMinGrid).
	EnvMinGrid = env.MinGrid
	// EnvLaunch says where the calls of a process that drives several
	// local ranks launch: auto, caller or workers (see Launch).
	EnvLaunch = env.Launch
	// EnvPDL says how kernels are launched after the stream's previous
	// kernel: auto, off, wait or early (see PDL).
	EnvPDL = env.PDL
	// EnvCopyEngineMin is the smallest all-gather (any team) or 2-rank
	// broadcast, in bytes a rank sends, that the unicast transport moves
	// with the copy engines; same syntax as NVLS_ONESHOT_MAX; 0 never.
	EnvCopyEngineMin = env.CEMin
	// EnvLLTwoMax is the largest reduce, in bytes, that runs LL in two
	// steps above the LL limit (see WithLLTwoMax); same syntax as
	// NVLS_ONESHOT_MAX; 0 never.
	EnvLLTwoMax = env.LLTwoMax
	// EnvLLTwoBcastMax is the largest broadcast, in bytes, that runs LL
	// in two steps above the LL limit (see WithLLTwoBcastMax); same
	// syntax as NVLS_ONESHOT_MAX; 0 never.
	EnvLLTwoBcastMax = env.LLTwoBcastMax
	// EnvRingMin is the smallest reduce, in bytes, of 2 ranks or more
	// that runs as a ring (see WithRingMin); same syntax as
	// NVLS_ONESHOT_MAX; 0 never.
	EnvRingMin = env.RingMin
	// EnvRingBytes is the ring reduce's FIFO a rank (see WithRingBytes);
	// same syntax as NVLS_ONESHOT_MAX.
	EnvRingBytes = env.RingBytes
	// EnvReducePullMin is the smallest reduce, in bytes, that the root
	// pulls alone (see WithReducePullMin); same syntax as
	// NVLS_ONESHOT_MAX; 0 never.
	EnvReducePullMin = env.ReducePullMin
	// EnvStageBytes is the size of each of the two staging areas (see
	// WithStageBytes), same syntax as NVLS_ONESHOT_MAX.
	EnvStageBytes = env.StageBytes
	// EnvTimeout bounds every barrier wait on the device: a Go duration
	// (5s, 500ms) or a number of seconds (5, 0.5), more than zero.
	EnvTimeout = env.Timeout
)

// Defaults. The one-shot crossover and the grid come from 2 x H200
// (docs/perf.md); set them with the options or the environment, no rebuild
// needed.
const (
	// DefaultLLMax: all-reduces up to 128 KiB run the LL kernel (4 x
	// H100, docs/perf.md run 20: LL at 128 KiB 8.6 us, the one-shot 19.1,
	// NCCL 11.4). The LL area it needs, 4 bytes per payload byte and rank
	// (WorkspaceBytes counts it), is 512 KiB per rank of the team (4 MiB
	// for 8 ranks), from the workspace.
	DefaultLLMax = 128 << 10
	// DefaultLLMax2 is DefaultLLMax for teams of 2 ranks, where LL moves
	// each rank's payload once over the one link, as the one-shot does,
	// without the one-shot's barriers: 512 KiB (2 x H200, docs/perf.md
	// run 32: LL ahead of the barrier kernels to 512 KiB for all-reduce,
	// reduce-scatter slices and reduce, level for all-gather, behind from
	// 1 MiB).
	DefaultLLMax2 = 512 << 10
	// DefaultOneShotMax: all-reduces up to 128 KiB (DefaultLLMax) run
	// one-shot in teams of 3 or more ranks, so that with LL on nothing
	// runs one-shot (4 x H100, docs/perf.md run 83: at 256 KiB the
	// two-shot all-reduce took 7.5 us against the one-shot's 9.0-9.3, the
	// reduce 8.3 against 8.6; 256 KiB had never been measured).
	DefaultOneShotMax = 128 << 10
	// DefaultOneShotMax2 is DefaultOneShotMax for teams of 2 ranks: 512
	// KiB, DefaultLLMax2, so that nothing above LL runs one-shot (2 x
	// H100, docs/perf.md run 82: at 1 MiB the two-shot reduce took 8.7 us
	// against the one-shot's 9.9, the all-reduce 8.8-8.9 against
	// 9.9-11.0; 1 MiB had come from an early 2 x H200 measurement).
	DefaultOneShotMax2 = 512 << 10
	// DefaultMaxGrid: the team's SM count, capped at 256, the most blocks
	// the kernels' barriers have slots for (measured on 2 x H200: the bandwidth of large all-reduces grows up
	// to the full 132 SMs). Where ranks share a device
	// (team.WithSharedDevices) it is the SM count divided by the most
	// ranks on one device, at least 1.
	DefaultMaxGrid = 256
	// DefaultMinGrid: launches spread over up to 32 blocks at one vector
	// a thread before threads take more (see WithMinGrid). 4 x H200
	// (docs/perf.md run 44): 32 against 0 took 20-35% off the 256 KiB -
	// 1 MiB all-reduce, reduce and broadcast, 16 a little less, 64
	// slowed broadcast at 2-4 MiB. LL launches keep their shape: spread
	// the same way they were 0.1-0.8 us slower at 512 B - 8 KiB (run 45).
	DefaultMinGrid = 32
	// DefaultCopyEngineMin: all-gathers and 2-rank broadcasts of 128 MiB
	// a rank and more go by copy engine. 2 x H200 (docs/perf.md run 46):
	// broadcast 256 MiB 739 -> 691-698 us, all-gather of 128 MiB a rank
	// 377 -> 361-369; level at 64 MiB a rank, 1.1-2x slower at 4-16 MiB.
	DefaultCopyEngineMin = 128 << 20
	// DefaultCopyEngineMin3 is DefaultCopyEngineMin for teams of 3 ranks
	// and more: all-gathers of 64 MiB a rank and more go by copy engine,
	// and all-reduces from 128 MiB their all-gather half. 256 MiB
	// all-gathers at 4 ranks took 563-568 us out of place against 586 by
	// the kernel on 4 x H100 (docs/perf.md run 90) and 561 / 544 against
	// 585 / 586 on 4 x H200 (run 93), the 128 MiB all-reduce 598-601
	// against 601-604; at 32 MiB a rank the kernel was faster (run 90).
	// At 3 ranks (4 x H200, runs 104-105) the 192 MiB all-gather took
	// 378.7 / 366.0 us against 383.6 / 384.2, the 192 MiB all-reduce
	// 773 against 788-790; at 32 MiB a rank the kernel was 5% faster.
	// 8 ranks are not measured.
	DefaultCopyEngineMin3 = 64 << 20
	// DefaultLLTwoMax: reduces up to 256 KiB above the LL limit run LL in
	// two steps where the LL area holds them (see WithLLTwoMax): on 4 x
	// H100 (docs/perf.md run 85) the 256 KiB reduce took 6.3-6.4 us in
	// two LL steps against 8.1-8.3 by the two-shot kernel and NCCL's
	// 6.4-6.6.
	DefaultLLTwoMax = 256 << 10
	// DefaultLLTwoBcastMax: broadcasts up to 1 MiB above the LL limit run
	// LL in two steps (see WithLLTwoBcastMax). On 4 x H200 (docs/perf.md
	// run 91) 256 KiB took 6.5 us against 7.9 by the barrier kernel and
	// NCCL's 7.5; 512 KiB 7.9 against 8.9, 1 MiB 10.4 against 11.3.
	DefaultLLTwoBcastMax = 1 << 20
	// DefaultTimeout bounds every barrier wait on the device; it is also
	// Sync's deadline (plus grace) when its context has none.
	DefaultTimeout = 10 * time.Second
	// DefaultStageBytes is the size of each of the two staging areas the
	// copy-in / copy-out path and the in-place one-shot all-reduce use;
	// messages larger than that go in chunks of it.
	DefaultStageBytes = 2 << 20
	// DefaultRingBytes is the ring reduce's FIFO a rank, taken from the
	// workspace where the ring is on (WithRingMin): 127 blocks of two
	// 128 KiB slots. More blocks were faster at every size from 64 MiB:
	// on 4 x H200 the 256 MiB reduce took 817 us with 127 blocks, 834
	// with 63 (docs/perf.md run 108); on 2 x H200 it took 738, 753 with
	// 63 and 779-801 with 31 (runs 110, 112).
	DefaultRingBytes = 32 << 20
	// DefaultReducePullMin2: in a team of 2 on devices of their own,
	// reduces of team-buffer sends of 8 MiB and more (where the copy
	// engines do not take them) run the one-shot kernel, the root loading
	// the peer's whole send: the root's link then carries load responses
	// alone, where the two-shot's stores, responses and the peer's read
	// requests share it. On 2 x H200
	// (docs/perf.md run 117) the 256 MiB reduce in place took 735.5 us
	// against the two-shot's 775 and NCCL's 736, 64 MiB 190-192 against
	// 199-201, 8 MiB 28.7-29.1 against 29.6-29.7; at 1-2 MiB the one-shot
	// was slower (one GPU's SMs alone). From 3 ranks the default is 0:
	// the root would pull every peer's send.
	DefaultReducePullMin2 = 8 << 20
	// DefaultReduceCopyEngineMin2 is where the 2-rank reduce goes by copy
	// engine (out of place, team buffers) while the pull is on and the
	// copy-engine limit is the default: at 128 MiB the pull took 373 us
	// against the copy engines' 387-389, at 256 MiB 735.5 against 728
	// (2 x H200, docs/perf.md run 117).
	DefaultReduceCopyEngineMin2 = 256 << 20
	// vecsPerThread is how many 16-byte vectors each thread of a block
	// handles, once the grid has reached the min grid, before the grid
	// grows by one block. 1 everywhere was tried on 4 x H100
	// (docs/perf.md, run 20): 128-512 KiB 15-20% faster, 2-8 MiB 5-15%
	// slower (more blocks, more barrier arrivals); the min grid takes the
	// first without the second.
	vecsPerThread = 4
)

// Option configures New.
type Option func(*config)

// Launch says where a Comm's calls launch their kernels (and where Sync
// waits with a current context) in a process of several local ranks.
// Only the host's work moves: the kernels, and so the ranks of other
// processes, see no difference.
type Launch int

const (
	// LaunchAuto launches from the calling goroutine where the process
	// has one local rank, else on the workers.
	LaunchAuto Launch = iota
	// LaunchWorkers launches on each local rank's worker thread, every
	// rank at once (the context of its device current there).
	LaunchWorkers
	// LaunchCaller launches from the calling goroutine, one local rank
	// after the other, making each rank's context current in turn where
	// the ranks have several (one process driving several GPUs): no
	// worker to wake, a context switch a rank instead.
	LaunchCaller
)

// launchNames are the Launch values' names (also NVLS_LAUNCH's), by value.
var launchNames = []string{"auto", "workers", "caller"}

func (l Launch) String() string { return enumName(int(l), launchNames, "Launch") }

// WithLaunch says where calls launch (see Launch). It wins over
// NVLS_LAUNCH.
func WithLaunch(l Launch) Option {
	return func(c *config) { c.launch, c.launchSet = l, true }
}

// WithCopyEngineMin sets the smallest all-gather (a team of 2 ranks or
// more) or broadcast (a team of 2), in bytes a rank sends, that the
// unicast transport moves with the copy engines, a cuMemcpyDtoDAsync into
// every peer's buffer between two barrier kernels, instead of the SMs'
// stores (default DefaultCopyEngineMin, DefaultCopyEngineMin3 from 3
// ranks); 0 never. An all-reduce of team
// buffers of at least twice as many bytes, in slices (count / nranks
// elements) of whole 16-byte vectors, runs its all-gather half so, after
// a reduce-scatter kernel. Broadcasts in bigger teams, teams where ranks share a device
// (team.WithSharedDevices: the kernels are faster there), and calls whose
// recv is not a team buffer, ignore it. It wins over NVLS_CE_MIN; every rank must resolve
// the same value.
func WithCopyEngineMin(bytes uint64) Option {
	return func(c *config) { c.ceMin, c.ceMinSet = bytes, true }
}

// WithLLTwoMax sets the largest reduce, in bytes, that runs LL in two
// steps above the LL limit (default DefaultLLTwoMax; 0 never), with no
// barrier: a reduce-scatter of the payload's lines to every rank, then
// every rank's reduced slice to the root, so that each rank sends
// 2 (n - 1) / n of the payload rather than n - 1 times it, as far as the
// LL limit's area holds it: n / 2 times the LL limit. The unicast
// transport only (in a team of 2 it is the one-step LL kernel). It wins
// over NVLS_LL_TWO_MAX; every rank must resolve the same value.
func WithLLTwoMax(bytes uint64) Option {
	return func(c *config) { c.llTwoMax, c.llTwoMaxSet = bytes, true }
}

// WithLLTwoBcastMax sets the largest broadcast, in bytes, that runs LL in
// two steps above the LL limit (default DefaultLLTwoBcastMax; 0 never),
// with no barrier: the root's lines in n - 1 slices, one to each other
// rank, which passes its slice on to the others, so that the root's links
// carry the payload once rather than n - 1 times. The LL area grows to
// hold it (WorkspaceBytes): a slice and a line a slot, 2 n (ceil(lines /
// (n - 1)) + 1) lines in all. The unicast transport only, from 3 ranks (a
// team of 2 has a larger LL limit instead). It wins over
// NVLS_LL_TWO_BCAST_MAX; every rank must resolve the same value.
func WithLLTwoBcastMax(bytes uint64) Option {
	return func(c *config) { c.llTwoBcastMax, c.llTwoBcastMaxSet = bytes, true }
}

// PDL says whether a Comm's kernels use programmatic dependent launch
// (compute capability 9.0+, CUDA 12.3+): launched with programmatic stream
// serialization, a kernel starts as the stream's previous kernel ends,
// before that kernel's memory is flushed, and waits for the flush in its
// first instruction (griddepcontrol.wait) rather than in the launch; what
// it computes is the same. docs/perf.md has what it saves.
type PDL int

const (
	// PDLAuto is PDLWait where every local rank's device and the driver
	// support it and the loaded PTX waits at entry, else PDLOff.
	PDLAuto PDL = iota
	// PDLOff launches every kernel after the previous one has finished.
	PDLOff
	// PDLWait launches with programmatic stream serialization: the kernel
	// may start once the previous kernel's blocks have exited. NCCL's
	// symmetric kernels launch so.
	PDLWait
	// PDLEarly is PDLWait, and every kernel also lets the stream's next
	// kernel launch at its own start (griddepcontrol.launch_dependents):
	// a following collective of the Comm, or a kernel of the caller's
	// launched with programmatic stream serialization, starts while this
	// one runs and waits in its griddepcontrol.wait. A kernel of the
	// caller's so launched must wait before it reads what the collective
	// writes, as the PDL rules require anyway. Refused where ranks share
	// a device: a waiting kernel holds its blocks' resources, and the
	// sharing ranks' kernels must all be resident at once.
	PDLEarly
)

// pdlNames are the PDL values' names (also NVLS_PDL's), by value.
var pdlNames = []string{"auto", "off", "wait", "early"}

func (p PDL) String() string { return enumName(int(p), pdlNames, "PDL") }

// enumName is value v's name in names (indexed by value), or
// "Type(v)" for a value without one.
func enumName(v int, names []string, typ string) string {
	if v >= 0 && v < len(names) {
		return names[v]
	}
	return fmt.Sprintf("%s(%d)", typ, v)
}

// WithPDL says how kernels launch after the stream's previous kernel (see
// PDL). It wins over NVLS_PDL. PDLWait and PDLEarly on a device or driver
// without PDL, or with PTX that does not wait at entry, make New fail.
func WithPDL(p PDL) Option {
	return func(c *config) { c.pdl, c.pdlSet, c.pdlSrc = p, true, "WithPDL" }
}

type config struct {
	llMax         uint64
	llMaxSet      bool
	oneShotMax    uint64
	oneShotMaxSet bool
	maxGrid       int
	maxGridSet    bool
	minGrid       int
	minGridSet    bool
	timeout       time.Duration
	timeoutSet    bool
	stage         uint64
	stageSet      bool
	launch        Launch
	launchSet     bool
	pdl           PDL
	pdlSet        bool
	pdlSrc        string
	ceMin         uint64
	ceMinSet      bool
	llTwoMax      uint64
	llTwoMaxSet   bool
	// the two-step LL broadcast's limit
	llTwoBcastMax    uint64
	llTwoBcastMaxSet bool
	// the ring reduce's limit and FIFO
	ringMin, ringBytes       uint64
	ringMinSet, ringBytesSet bool
	// the reduce's pull limit (WithReducePullMin)
	pullMin    uint64
	pullMinSet bool
	// sources, for the log line
	llSrc, oneShotSrc, gridSrc, minGridSrc, timeoutSrc string
	// deadline is the timeout and where it came from, as the errors of a
	// kernel that ran out of it name it: "NVLS_TIMEOUT=1ns",
	// "WithTimeout(5s)" or the default.
	deadline string
	// and their kinds, for the agreement between the ranks (agree.go)
	llFrom, oneShotFrom, gridFrom, minGridFrom, timeoutFrom, stageFrom, ceFrom, llTwoFrom, llTwoBcastFrom source
	ringMinFrom, ringBytesFrom, pullFrom                                                                  source
}

// DefaultMaxGrid is the kernels' MaxBlocks, written out for the docs.
var (
	_ [DefaultMaxGrid - kabi.MaxBlocks]struct{}
	_ [kabi.MaxBlocks - DefaultMaxGrid]struct{}
)

// WithLLMax sets the largest all-reduce (in bytes) that runs the LL
// (low-latency) kernel; larger ones run one-shot or two-shot. 0 turns LL
// off. New allocates an LL area of 4 x bytes x ranks from the team's
// workspace (WorkspaceBytes counts it). It wins over NVLS_LL_MAX.
func WithLLMax(bytes uint64) Option {
	return func(c *config) { c.llMax, c.llMaxSet = bytes, true }
}

// WithOneShotMax sets the largest all-reduce (in bytes, above the LL
// limit) that runs the one-shot kernel; larger ones run two-shot. 0 makes every all-reduce
// two-shot, math.MaxUint64 every one one-shot. It wins over
// NVLS_ONESHOT_MAX.
func WithOneShotMax(bytes uint64) Option {
	return func(c *config) { c.oneShotMax, c.oneShotMaxSet = bytes, true }
}

// WithMaxGrid sets the largest grid a kernel is launched with (1 to
// DefaultMaxGrid's cap of 256; the team's SM count caps it further). It wins over
// NVLS_GRID.
//
// The kernels of the ranks wait on each other, so every rank's blocks
// must be resident at once. Where ranks share a device
// (team.WithSharedDevices; teamlink.Team.MaxRanksOnDevice > 1), New clamps the
// grid (this option's, NVLS_GRID's or the default) to the SM count
// divided by the most ranks on one device, at least 1, rather than
// refusing it; the INFO line "collectives: ready" says so in grid_from
// ("WithMaxGrid (clamped from 132 to 66: ...)"), and MaxGrid returns
// the clamped value.
func WithMaxGrid(blocks int) Option {
	return func(c *config) { c.maxGrid, c.maxGridSet = blocks, true }
}

// WithMinGrid sets the grid a launch spreads its 16-byte vectors over, one
// a thread, before each thread takes more (up to 4, then the grid grows
// again): a launch of v vectors a rank runs max(ceil(v/2048),
// min(ceil(v/512), blocks)) blocks of 512 threads, never more than the max
// grid. 0 gives every thread 4 vectors from the first block (fewest
// blocks, fewest barrier arrivals); more blocks move the medium sizes
// faster where the work per vector is heavy (bf16 sums). LL launches
// (a line a thread) are not spread. 0 to 256; it wins over
// NVLS_MIN_GRID.
func WithMinGrid(blocks int) Option {
	return func(c *config) { c.minGrid, c.minGridSet = blocks, true }
}

// WithTimeout bounds every barrier wait of the kernels (a positive
// duration); a kernel whose wait expires records it in its rank's status
// word, which Sync reports. It is also Sync's deadline (plus a grace of up
// to a second) when Sync's context has none. It wins over NVLS_TIMEOUT.
func WithTimeout(d time.Duration) Option {
	return func(c *config) { c.timeout, c.timeoutSet = d, true }
}

// WithRingMin sets the smallest reduce, in bytes, that runs as a ring:
// along the chain root + 1, ..., root each rank adds its piece to its
// predecessor's partial sum and stores the sum into its successor's
// FIFO, the root into its recv (NCCL's pattern: every GPU stores to one
// peer). It applies to teams of 2 ranks or more on the unicast
// transport, 4- and 8-byte types (a 16-bit partial sum would be rounded
// at every hop), and send and recv team buffers; at 2 ranks, out of
// place from the copy-engine limit, the copy engines come first. Default
// 0, never: the FIFO costs the workspace 32 MiB a rank. On 4 x H200
// (docs/perf.md run 108) the ring took the 256 MiB reduce from 929 to
// 817 us, NCCL's 749 (its crossover at 4 ranks lies between 64 and 256
// MiB); on 2 x H200 (run 110) from 64 MiB it runs level with NCCL
// (0.99-1.0), where in place the kernel ran 0.94-0.98. Where it is on,
// New takes the ring's FIFO (WithRingBytes) from the workspace. It wins
// over NVLS_RING_MIN; every rank must resolve the same.
func WithRingMin(bytes uint64) Option {
	return func(c *config) { c.ringMin, c.ringMinSet = bytes, true }
}

// WithRingBytes sets the ring reduce's FIFO a rank (default
// DefaultRingBytes), which New takes from the team's workspace where the
// ring is on (WithRingMin): slots of two 128 KiB pieces a block, so its
// size sets the ring's grid. It wins over NVLS_RING_BYTES; every rank
// must resolve the same.
func WithRingBytes(bytes uint64) Option {
	return func(c *config) { c.ringBytes, c.ringBytesSet = bytes, true }
}

// WithReducePullMin sets the smallest reduce, in bytes (above the LL
// limits), of a send in team buffers that runs the one-shot kernel on the
// unicast transport: the root alone loads every peer's send and reduces
// it into its recv, the peers' SMs idle (a send copied in goes in chunks
// of the staging size and keeps the two-shot). Default
// DefaultReducePullMin2 in a team of 2 ranks on devices of their own,
// else 0 (never): from 3 ranks the root's link would carry every peer's
// send, and ranks that share a device have no link to spare. The copy engines and the ring (WithCopyEngineMin,
// WithRingMin) come first where they apply. It wins over
// NVLS_REDUCE_PULL_MIN; every rank must resolve the same.
func WithReducePullMin(bytes uint64) Option {
	return func(c *config) { c.pullMin, c.pullMinSet = bytes, true }
}

// WithStageBytes sets the size of each of the two staging areas that New
// allocates from the team's workspace (rounded up to team.Alignment; at
// least 4 KiB): copy-in and copy-out of pointers outside the workspace,
// and the in-place one-shot all-reduce, go in chunks of this size.
func WithStageBytes(bytes uint64) Option {
	return func(c *config) { c.stage, c.stageSet = bytes, true }
}

const minStage = 4 << 10

// gridSrcDefault is the grid's source when neither WithMaxGrid nor
// NVLS_GRID gave it.
const gridSrcDefault = "default (SM count)"

// envChoice reads variable name as one of names (indexed by value); ok
// is false where it is unset.
func envChoice[T ~int](name string, names []string) (v T, ok bool, err error) {
	s, ok, err := env.OS.Enum(name, names...)
	if err != nil {
		return v, false, fmt.Errorf("collectives: %w", err)
	}
	if !ok {
		return v, false, nil
	}
	return T(slices.Index(names, s)), true, nil
}

// choose is one setting's value and where it came from: the option's
// where set (named optName), else the environment's (envName), else the
// default (defSrc).
func choose[T any](opt T, optSet bool, optName string, envV T, envSet bool, envName string, def T, defSrc string) (T, string, source) {
	switch {
	case optSet:
		return opt, optName, fromOption
	case envSet:
		return envV, envName, fromEnv
	}
	return def, defSrc, fromDefault
}

func resolve(opts []Option) (config, error) {
	var c config
	for _, o := range opts {
		if o != nil {
			o(&c)
		}
	}
	envOneShot, okOneShot, err := env.OS.Size(EnvOneShotMax)
	if err != nil {
		return c, fmt.Errorf("collectives: %w", err)
	}
	envLL, okLL, err := env.OS.Size(EnvLLMax)
	if err != nil {
		return c, fmt.Errorf("collectives: %w", err)
	}
	envGrid, okGrid, err := env.OS.Int(EnvGrid, 1, kabi.MaxBlocks)
	if err != nil {
		return c, fmt.Errorf("collectives: %w", err)
	}
	envMinGrid, okMinGrid, err := env.OS.Int(EnvMinGrid, 0, kabi.MaxBlocks)
	if err != nil {
		return c, fmt.Errorf("collectives: %w", err)
	}
	envLaunch, okLaunch, err := envChoice[Launch](EnvLaunch, launchNames)
	if err != nil {
		return c, err
	}
	switch {
	case c.launchSet:
		if c.launch < LaunchAuto || c.launch > LaunchCaller {
			return c, fmt.Errorf("collectives: %w: WithLaunch(%v): want LaunchAuto, LaunchWorkers or LaunchCaller", ErrInvalid, c.launch)
		}
	case okLaunch:
		c.launch = envLaunch
	}
	envPDL, okPDL, err := envChoice[PDL](EnvPDL, pdlNames)
	if err != nil {
		return c, err
	}
	switch {
	case c.pdlSet:
		if c.pdl < PDLAuto || c.pdl > PDLEarly {
			return c, fmt.Errorf("collectives: %w: WithPDL(%v): want PDLAuto, PDLOff, PDLWait or PDLEarly", ErrInvalid, c.pdl)
		}
	case okPDL:
		c.pdl, c.pdlSrc = envPDL, EnvPDL
	default:
		c.pdlSrc = "default"
	}
	envCE, okCE, err := env.OS.Size(EnvCopyEngineMin)
	if err != nil {
		return c, fmt.Errorf("collectives: %w", err)
	}
	c.ceMin, _, c.ceFrom = choose(c.ceMin, c.ceMinSet, "WithCopyEngineMin", envCE, okCE, EnvCopyEngineMin, DefaultCopyEngineMin, "default")
	envTwo, okTwo, err := env.OS.Size(EnvLLTwoMax)
	if err != nil {
		return c, fmt.Errorf("collectives: %w", err)
	}
	c.llTwoMax, _, c.llTwoFrom = choose(c.llTwoMax, c.llTwoMaxSet, "WithLLTwoMax", envTwo, okTwo, EnvLLTwoMax, DefaultLLTwoMax, "default")
	envBcast, okBcast, err := env.OS.Size(EnvLLTwoBcastMax)
	if err != nil {
		return c, fmt.Errorf("collectives: %w", err)
	}
	c.llTwoBcastMax, _, c.llTwoBcastFrom = choose(c.llTwoBcastMax, c.llTwoBcastMaxSet, "WithLLTwoBcastMax", envBcast, okBcast, EnvLLTwoBcastMax, DefaultLLTwoBcastMax, "default")
	envRingMin, okRingMin, err := env.OS.Size(EnvRingMin)
	if err != nil {
		return c, fmt.Errorf("collectives: %w", err)
	}
	c.ringMin, _, c.ringMinFrom = choose(c.ringMin, c.ringMinSet, "WithRingMin", envRingMin, okRingMin, EnvRingMin, 0, "default")
	envRingBytes, okRingBytes, err := env.OS.Size(EnvRingBytes)
	if err != nil {
		return c, fmt.Errorf("collectives: %w", err)
	}
	c.ringBytes, _, c.ringBytesFrom = choose(c.ringBytes, c.ringBytesSet, "WithRingBytes", envRingBytes, okRingBytes, EnvRingBytes, DefaultRingBytes, "default")
	if c.ringMin != 0 && c.ringBytes < kabi.PushReduceBytes(1, kabi.BlockThreads) {
		return c, fmt.Errorf("collectives: %w: the ring reduce's FIFO (%s): %d bytes, want at least %d (one block's slots)", ErrInvalid,
			sourceName(uint8(c.ringBytesFrom), "WithRingBytes", EnvRingBytes), c.ringBytes, kabi.PushReduceBytes(1, kabi.BlockThreads))
	}
	envPull, okPull, err := env.OS.Size(EnvReducePullMin)
	if err != nil {
		return c, fmt.Errorf("collectives: %w", err)
	}
	// sized makes the default DefaultReducePullMin2 for a team of 2.
	c.pullMin, _, c.pullFrom = choose(c.pullMin, c.pullMinSet, "WithReducePullMin", envPull, okPull, EnvReducePullMin, 0, "default")
	envTimeout, okTimeout, err := env.OS.Duration(EnvTimeout)
	if err != nil {
		return c, fmt.Errorf("collectives: %w", err)
	}
	c.llMax, c.llSrc, c.llFrom = choose(c.llMax, c.llMaxSet, "WithLLMax", envLL, okLL, EnvLLMax, DefaultLLMax, "default")
	// sized makes the default DefaultOneShotMax2 for a team of 2.
	c.oneShotMax, c.oneShotSrc, c.oneShotFrom = choose(c.oneShotMax, c.oneShotMaxSet, "WithOneShotMax", envOneShot, okOneShot, EnvOneShotMax, DefaultOneShotMax, "default")
	if c.maxGridSet && (c.maxGrid < 1 || c.maxGrid > kabi.MaxBlocks) {
		return c, fmt.Errorf("collectives: %w: WithMaxGrid(%d): want 1 to %d", ErrInvalid, c.maxGrid, kabi.MaxBlocks)
	}
	c.maxGrid, c.gridSrc, c.gridFrom = choose(c.maxGrid, c.maxGridSet, "WithMaxGrid", envGrid, okGrid, EnvGrid, DefaultMaxGrid, gridSrcDefault)
	if c.minGridSet && (c.minGrid < 0 || c.minGrid > kabi.MaxBlocks) {
		return c, fmt.Errorf("collectives: %w: WithMinGrid(%d): want 0 to %d", ErrInvalid, c.minGrid, kabi.MaxBlocks)
	}
	c.minGrid, c.minGridSrc, c.minGridFrom = choose(c.minGrid, c.minGridSet, "WithMinGrid", envMinGrid, okMinGrid, EnvMinGrid, DefaultMinGrid, "default")
	switch {
	case c.timeoutSet:
		if c.timeout <= 0 {
			return c, fmt.Errorf("collectives: %w: WithTimeout(%v): want a positive duration", ErrInvalid, c.timeout)
		}
		c.timeoutSrc, c.timeoutFrom = "WithTimeout", fromOption
		c.deadline = fmt.Sprintf("WithTimeout(%v)", c.timeout)
	case okTimeout:
		c.timeout, c.timeoutSrc, c.timeoutFrom = envTimeout, EnvTimeout, fromEnv
		c.deadline = env.OS.DurationSetting(EnvTimeout, envTimeout)
	default:
		c.timeout, c.timeoutSrc, c.timeoutFrom = DefaultTimeout, "default", fromDefault
		c.deadline = fmt.Sprintf("%v, the default; %s or WithTimeout sets it", DefaultTimeout, EnvTimeout)
	}
	envStage, okStage, err := env.OS.Size(EnvStageBytes)
	if err != nil {
		return c, fmt.Errorf("collectives: %w", err)
	}
	stageSrc := fmt.Sprintf("WithStageBytes(%d)", c.stage)
	switch {
	case c.stageSet:
		c.stageFrom = fromOption
	case okStage:
		if envStage < minStage {
			v, _ := env.OS.String(EnvStageBytes)
			return c, fmt.Errorf("collectives: %w", &env.Error{Var: EnvStageBytes, Value: v, Accepts: fmt.Sprintf("a size of at least %d bytes", minStage)})
		}
		c.stage, c.stageFrom = envStage, fromEnv
	default:
		c.stage, c.stageFrom = DefaultStageBytes, fromDefault
	}
	if c.stage < minStage || c.stage > math.MaxUint64/4 {
		return c, fmt.Errorf("collectives: %w: %s: want at least %d bytes", ErrInvalid, stageSrc, minStage)
	}
	c.stage = (c.stage + 255) &^ 255
	return c, nil
}

// sized is the configuration for a team of nranks ranks: the limits that
// neither an option nor the environment set take their 2-rank defaults
// (DefaultLLMax2, DefaultOneShotMax2, DefaultReducePullMin2) in a team of
// 2, and the copy-engine limit DefaultCopyEngineMin3 from 3 ranks.
// prepare turns the defaulted pull off where ranks share a device.
func (c config) sized(nranks int) config {
	if nranks >= 3 && c.ceFrom == fromDefault {
		c.ceMin = DefaultCopyEngineMin3
	}
	if nranks != 2 {
		return c
	}
	if c.llFrom == fromDefault {
		c.llMax = DefaultLLMax2
	}
	if c.oneShotFrom == fromDefault {
		c.oneShotMax = DefaultOneShotMax2
	}
	if c.pullFrom == fromDefault {
		c.pullMin = DefaultReducePullMin2
	}
	return c
}

// reduceCEMin is the reduce's copy-engine limit in a team of nranks (of
// a sized configuration): the copy-engine limit, or at 2 ranks with the
// pull on and the limit defaulted, DefaultReduceCopyEngineMin2.
func (c *config) reduceCEMin(nranks int) uint64 {
	if nranks == 2 && c.ceFrom == fromDefault && c.pullMin != 0 {
		return max(c.ceMin, DefaultReduceCopyEngineMin2)
	}
	return c.ceMin
}

// WorkspaceBytes is how much of a team's data area New takes for a team
// of nranks ranks with these options (and the environment, read as New
// reads it): the two staging areas, the LL area and, from 2 ranks where
// the ring reduce is on (WithRingMin), its FIFO, each rounded up to
// team.Alignment. Size the team's data area (team.WithWorkspaceSize) as
// the team buffers you allocate plus this.
func WorkspaceBytes(nranks int, opts ...Option) (uint64, error) {
	if nranks < 1 || nranks > kabi.MaxRanks {
		return 0, fmt.Errorf("collectives: %w: WorkspaceBytes: %d ranks (1 to %d)", ErrInvalid, nranks, kabi.MaxRanks)
	}
	cfg, err := resolve(opts)
	if err != nil {
		return 0, err
	}
	cfg = cfg.sized(nranks)
	round := func(b uint64) uint64 { return (b + team.Alignment - 1) / team.Alignment * team.Alignment }
	n := round(2 * cfg.stage)
	if cfg.llMax > 0 {
		n += round(llAreaLines(cfg, nranks) * 2 * uint64(nranks) * kabi.LLLineBytes)
	}
	if nranks >= 2 && cfg.ringMin != 0 {
		n += round(cfg.ringBytes)
	}
	return n, nil
}

// llAreaLines is the LL area's capacity in lines a slot (a parity and a
// source) for a team of nranks ranks: the LL limit's payload, or the
// two-step broadcast's slice and its line where that is more.
func llAreaLines(cfg config, nranks int) uint64 {
	lines := linesOf(cfg.llMax)
	if nranks >= 3 && cfg.llTwoBcastMax > cfg.llMax {
		if b := llTwoBcastLines(cfg.llTwoBcastMax, nranks); b > lines {
			lines = b
		}
	}
	return lines
}

// llTwoBcastLines is the lines a slot a two-step LL broadcast of n bytes
// takes in a team of nranks (3 or more): a slice and one line.
func llTwoBcastLines(n uint64, nranks int) uint64 {
	lines := linesOf(n)
	return lines/uint64(nranks-1) + b2u64(lines%uint64(nranks-1) != 0) + 1
}

// linesOf is the LL lines n payload bytes take (no overflow).
func linesOf(n uint64) uint64 {
	return n/kabi.LLLinePayload + b2u64(n%kabi.LLLinePayload != 0)
}

func b2u64(b bool) uint64 {
	if b {
		return 1
	}
	return 0
}
