package team

import (
	"fmt"
	"io"
	"log/slog"
	"os"
	"strings"
	"time"

	"github.com/nvls-go/nvls/cuda/trace"
	"github.com/nvls-go/nvls/internal/env"
)

// Environment variables the team reads (and NCCL_NVLS_ENABLE,
// cuda.EnvNVLSEnable). Every variable of nvls is read the same way: empty
// or blank is unset, and a value that is not understood is an *EnvError.
const (
	// EnvTransport picks the transport: auto, multicast or unicast.
	EnvTransport = env.Transport
	// EnvDebug sets the default logger's level: WARN, INFO or TRACE.
	EnvDebug = env.Debug
	// EnvSetupTimeout bounds the bring-up (New; NewRank where given): a
	// Go duration ("90s", "2m") or a number of seconds ("90", "2.5"), as
	// every duration of nvls's environment.
	EnvSetupTimeout = env.SetupTimeout
)

// DefaultSetupTimeout bounds New's bring-up when neither WithSetupTimeout
// nor NVLS_SETUP_TIMEOUT says otherwise.
const DefaultSetupTimeout = 60 * time.Second

// LevelTrace is the slog level of the driver-call lines (NVLS_DEBUG=TRACE):
// below slog.LevelDebug.
const LevelTrace = trace.LevelTrace

// DefaultDataBytes is the data area of the workspace when WithWorkspaceSize
// is not given.
const DefaultDataBytes = 256 << 20

// Transport is how ranks reach each other's memory.
type Transport int

// Transports.
const (
	// Auto: multicast where every device supports it and nothing turns it
	// off, unicast otherwise.
	Auto Transport = iota
	// Multicast: NVLink SHARP through a multicast object (multimem
	// instructions on the MC alias).
	Multicast
	// Unicast: plain loads and stores to every peer's memory over NVLink.
	Unicast
)

func (t Transport) String() string {
	switch t {
	case Auto:
		return "auto"
	case Multicast:
		return "multicast"
	case Unicast:
		return "unicast"
	}
	return fmt.Sprintf("Transport(%d)", int(t))
}

// ParseTransport parses "auto", "multicast" or "unicast" (any case).
func ParseTransport(s string) (Transport, error) {
	switch strings.ToLower(strings.TrimSpace(s)) {
	case "auto", "":
		return Auto, nil
	case "multicast":
		return Multicast, nil
	case "unicast":
		return Unicast, nil
	}
	return Auto, fmt.Errorf("team: unknown transport %q (want auto, multicast or unicast)", s)
}

// ErrBadEnv is matched by every *EnvError: one sentinel for every
// variable of nvls (collectives.ErrBadEnv is the same one).
var ErrBadEnv = env.ErrBad

// EnvError is an environment variable of nvls (NVLS_*, NCCL_NVLS_ENABLE),
// of any package, whose value is not understood: Var, Value as set, and
// Accepts, what the variable takes. It is the one error type for them
// all.
type EnvError = env.Error

// Option configures New and NewRank.
type Option func(*config)

type config struct {
	retries       int
	retryWithin   time.Duration
	retrySet      bool
	transport     Transport
	transportSet  bool
	logger        *slog.Logger
	dataBytes     uint64
	setupTimeout  time.Duration
	timeoutSet    bool
	workerSpin    time.Duration
	spinSet       bool
	sharedDevices bool
}

// WithTransport asks for a transport. It wins over NVLS_TRANSPORT; but
// NCCL_NVLS_ENABLE=0 wins over WithTransport(Multicast): asking for
// multicast while the switch is off is an error (the safety switch is
// never overridden).
func WithTransport(t Transport) Option {
	return func(c *config) { c.transport, c.transportSet = t, true }
}

// DefaultWorkerSpin is how long a rank's worker thread spins for the next
// job after each one, and Run for the workers' results, before parking
// (see WithWorkerSpin).
const DefaultWorkerSpin = 200 * time.Microsecond

// WithWorkerSpin sets how long each rank's worker thread (and Run, waiting
// for the workers) spins before parking: a job that arrives while its
// worker spins starts within a microsecond or so, where waking a parked
// thread costs tens of microseconds (a small collective's whole budget).
// Spinning is used only where GOMAXPROCS leaves a processor for every local
// rank's worker and one more for the caller; 0 turns it off.
func WithWorkerSpin(d time.Duration) Option {
	return func(c *config) { c.workerSpin, c.spinSet = max(d, 0), true }
}

// WithLogger sends the team's log lines (INFO: setup steps, the transport
// choice, the footprint; LevelTrace: every driver call) to l instead of the
// default logger (stderr, at the level NVLS_DEBUG names, WARN when unset).
func WithLogger(l *slog.Logger) Option {
	return func(c *config) { c.logger = l }
}

// WithWorkspaceSize sets the data area of each rank's workspace: the bytes
// Alloc hands out (default DefaultDataBytes). The workspace is this plus
// the signal area, rounded up to the granularities.
func WithWorkspaceSize(dataBytes uint64) Option {
	return func(c *config) { c.dataBytes = dataBytes }
}

// WithSetupTimeout bounds the bring-up: every exchange between the ranks
// (and, for New, the whole of New) ends by then, and a rank that did not
// arrive is named in the error (matching ErrPeerMissing and
// context.DeadlineExceeded). It wins over NVLS_SETUP_TIMEOUT. New uses
// DefaultSetupTimeout when neither is given; NewRank then leaves the
// deadline to ctx and the bootstrap. ctx's own deadline still applies
// when it is earlier.
func WithSetupTimeout(d time.Duration) Option {
	return func(c *config) { c.setupTimeout, c.timeoutSet = d, true }
}

// WithSharedDevices lets a team run several ranks on one GPU, for
// development and testing on fewer GPUs than ranks: New accepts a device
// more than once, and NewRank ranks of one device meet (each must pass
// it). Such a team is always unicast (a device joins a multicast object
// once; asking for multicast is ErrMulticastUnsupported). Its ranks share
// the GPU's SMs and bandwidth, so timings are not a node's; give each rank
// its own stream, and enqueue the ranks' work in step (a rank's thread
// that runs far ahead can block in the driver, whose queue is full of
// kernels waiting for a peer that cannot enqueue). docs/team.md says more.
func WithSharedDevices() Option {
	return func(c *config) { c.sharedDevices = true }
}

// Defaults of WithFabricRetry: a Fabric Manager that stalls while it
// forms the multicast team answers CUDA_ERROR_SYSTEM_NOT_READY for a few
// seconds.
const (
	DefaultFabricRetries     = 5
	DefaultFabricRetryWithin = 10 * time.Second
)

// WithFabricRetry bounds the retries of a multicast step that met
// CUDA_ERROR_SYSTEM_NOT_READY (802), a transient state of the fabric: all
// ranks vote after the step, and when a rank asks for a retry (and none
// failed otherwise) every rank retries it in lockstep, the ranks that
// failed redoing their part, after a pause that doubles from 100ms. At
// most retries times, and not after within from the first failure; then
// the step's error stands (auto: the fallback to unicast). 0 retries turns
// it off. Default: DefaultFabricRetries within DefaultFabricRetryWithin.
func WithFabricRetry(retries int, within time.Duration) Option {
	return func(c *config) { c.retries, c.retryWithin, c.retrySet = retries, within, true }
}

// resolved is the configuration with the environment read.
type resolved struct {
	// request and requestSrc: the transport asked for and who asked.
	request    Transport
	requestSrc string
	logger     *slog.Logger
	dataBytes  uint64
	// setupTimeout is the bring-up's bound; setupTimeoutSet says whether
	// an option or the environment gave it (else it is the default).
	setupTimeout    time.Duration
	setupTimeoutSet bool
	// setupTimeoutSrc says where setupTimeout came from, as the errors
	// of a setup that ran out of time name it: "NVLS_SETUP_TIMEOUT=1ns",
	// "WithSetupTimeout(5s)" or the default.
	setupTimeoutSrc string
	// workerSpin: see WithWorkerSpin.
	workerSpin time.Duration
	// sharedDevices: WithSharedDevices.
	sharedDevices bool
	// retries and retryWithin: WithFabricRetry.
	retries     int
	retryWithin time.Duration
	// nvlsOff: NCCL_NVLS_ENABLE turns multicast off.
	nvlsOff bool
}

// The values of the enums, as EnvError lists them.
var (
	transportValues = []string{"auto", "multicast", "unicast"}
	debugValues     = []string{"WARN", "INFO", "TRACE"}
)

// resolve reads the options and the process environment.
func resolve(opts []Option) (resolved, error) { return resolveEnv(opts, env.OS) }

// resolveEnv reads the options and the environment through src. A bad
// value of NVLS_TRANSPORT, NVLS_DEBUG, NVLS_SETUP_TIMEOUT or
// NCCL_NVLS_ENABLE is an error even where an option makes it moot, so
// that a typo never goes unnoticed.
func resolveEnv(opts []Option, src env.Source) (resolved, error) {
	var c config
	for _, o := range opts {
		if o != nil {
			o(&c)
		}
	}
	var r resolved
	envT, envSet, err := src.Enum(EnvTransport, transportValues...)
	if err != nil {
		return r, fmt.Errorf("team: %w", err)
	}
	envTransport, _ := ParseTransport(envT)
	if r.nvlsOff, _, err = src.NVLSEnable(); err != nil {
		return r, fmt.Errorf("team: %w", err)
	}
	switch {
	case c.transportSet:
		if c.transport < Auto || c.transport > Unicast {
			return r, fmt.Errorf("team: WithTransport(%v): want Auto, Multicast or Unicast", c.transport)
		}
		r.request, r.requestSrc = c.transport, fmt.Sprintf("WithTransport(%v)", c.transport)
	case envSet && envTransport != Auto:
		r.request, r.requestSrc = envTransport, fmt.Sprintf("%s=%s", EnvTransport, envTransport)
	default:
		r.request, r.requestSrc = Auto, "auto"
	}
	r.sharedDevices = c.sharedDevices
	if r.sharedDevices && r.request == Multicast {
		return r, fmt.Errorf("%w: multicast asked by %s, but WithSharedDevices lets ranks share a device, and a device joins a multicast object once: a team with shared devices is unicast (ask for unicast or auto)",
			ErrMulticastUnsupported, r.requestSrc)
	}
	lvl, err := debugLevelFrom(src)
	if err != nil {
		return r, err
	}
	envTimeout, timeoutEnvSet, err := src.Duration(EnvSetupTimeout)
	if err != nil {
		return r, fmt.Errorf("team: %w", err)
	}
	switch {
	case c.timeoutSet:
		if c.setupTimeout <= 0 {
			return r, fmt.Errorf("team: WithSetupTimeout(%v): want a positive duration", c.setupTimeout)
		}
		r.setupTimeout, r.setupTimeoutSet = c.setupTimeout, true
		r.setupTimeoutSrc = fmt.Sprintf("WithSetupTimeout(%v)", c.setupTimeout)
	case timeoutEnvSet:
		r.setupTimeout, r.setupTimeoutSet = envTimeout, true
		r.setupTimeoutSrc = src.DurationSetting(EnvSetupTimeout, envTimeout)
	default:
		r.setupTimeout = DefaultSetupTimeout
		r.setupTimeoutSrc = fmt.Sprintf("%v, the default; %s or WithSetupTimeout sets it", DefaultSetupTimeout, EnvSetupTimeout)
	}
	r.retries, r.retryWithin = DefaultFabricRetries, DefaultFabricRetryWithin
	if c.retrySet {
		if c.retries < 0 || c.retryWithin < 0 {
			return r, fmt.Errorf("team: WithFabricRetry(%d, %v): want a count and a duration >= 0", c.retries, c.retryWithin)
		}
		r.retries, r.retryWithin = c.retries, c.retryWithin
	}
	r.workerSpin = DefaultWorkerSpin
	if c.spinSet {
		r.workerSpin = c.workerSpin
	}
	r.logger = c.logger
	if r.logger == nil {
		r.logger = newDefaultLogger(os.Stderr, lvl)
	}
	r.dataBytes = c.dataBytes
	if r.dataBytes == 0 {
		r.dataBytes = DefaultDataBytes
	}
	return r, nil
}

// debugLevel is NVLS_DEBUG's level (WARN when unset).
func debugLevel() (slog.Level, error) { return debugLevelFrom(env.OS) }

func debugLevelFrom(src env.Source) (slog.Level, error) {
	v, _, err := src.Enum(EnvDebug, debugValues...)
	switch {
	case err != nil:
		return 0, fmt.Errorf("team: %w", err)
	case v == "INFO":
		return slog.LevelInfo, nil
	case v == "TRACE":
		return LevelTrace, nil
	}
	return slog.LevelWarn, nil
}

func newDefaultLogger(w io.Writer, lvl slog.Level) *slog.Logger {
	return slog.New(slog.NewTextHandler(w, &slog.HandlerOptions{
		Level: lvl,
		ReplaceAttr: func(groups []string, a slog.Attr) slog.Attr {
			if a.Key == slog.LevelKey && len(groups) == 0 {
				if l, ok := a.Value.Any().(slog.Level); ok && l <= LevelTrace {
					return slog.String(slog.LevelKey, "TRACE")
				}
			}
			return a
		},
	}))
}
