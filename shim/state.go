//go:build cgo

package main

import (
	"context"
	"fmt"
	"log/slog"
	"os"
	"sync"
	"syscall"
	"time"
	"unsafe"

	"github.com/nvls-go/nvls/collectives"
	"github.com/nvls-go/nvls/cuda"
	"github.com/nvls-go/nvls/internal/deadline"
	"github.com/nvls-go/nvls/internal/env"
	"github.com/nvls-go/nvls/nccl"
	"github.com/nvls-go/nvls/team"
	"github.com/nvls-go/nvls/team/sock"
)

// Version is the NCCL version whose API the shim follows: 2.28.3.
const Version = 22803

// The shim's own environment variables.
const (
	// EnvRealNCCL is the real NCCL's path, for the forwarded calls.
	EnvRealNCCL = env.RealNCCL
	// EnvSim runs the shim on the simulated node (a build with -tags
	// nvlssim only; the C tests set it).
	EnvSim = env.Sim
)

// shim is the process's state: the driver, the communicators, the
// groups of each thread.
var shim struct {
	mu     sync.Mutex
	drv    cuda.Driver
	drvErr error
	log    *slog.Logger
	level  *slog.LevelVar // the log's, from NVLS_DEBUG (ncclResetDebugInit reads it again)
	comms  map[unsafe.Pointer]*rankComm
	jobs   []*job         // live jobs, newest last (ncclMemAlloc looks here)
	groups map[int]*group // by OS thread id
	mem    map[uintptr]*memBlock
}

func init() {
	shim.comms = map[unsafe.Pointer]*rankComm{}
	shim.groups = map[int]*group{}
	shim.mem = map[uintptr]*memBlock{}
	shim.level = new(slog.LevelVar)
	shim.level.Set(debugLevel(env.OS))
	shim.log = slog.New(slog.NewTextHandler(os.Stderr, &slog.HandlerOptions{Level: shim.level}))
}

// debugLevel is NVLS_DEBUG's log level in src: INFO for INFO and TRACE,
// else WARN.
func debugLevel(src env.Source) slog.Level {
	if v, _, _ := src.Enum(env.Debug, "WARN", "INFO", "TRACE"); v == "INFO" || v == "TRACE" {
		return slog.LevelInfo
	}
	return slog.LevelWarn
}

// driver opens the driver once: the simulated node under NVLS_SIM=1 (in
// a build that has it), else libcuda.
func driver() (cuda.Driver, error) {
	shim.mu.Lock()
	defer shim.mu.Unlock()
	if shim.drv == nil && shim.drvErr == nil {
		if v, _ := env.OS.String(EnvSim); v != "" && v != "0" {
			shim.drv, shim.drvErr = openSim()
		} else {
			shim.drv, shim.drvErr = cuda.Open()
		}
		if shim.drvErr == nil {
			shim.drvErr = shim.drv.Init()
		}
		if shim.drvErr != nil {
			shim.drv = nil
			shim.drvErr = &callError{code: nccl.UnhandledCudaError, err: fmt.Errorf("libnccl-nvls: the CUDA driver: %w", shim.drvErr)}
		}
	}
	return shim.drv, shim.drvErr
}

// setupContext bounds a setup step by NVLS_SETUP_TIMEOUT (else
// team.DefaultSetupTimeout), naming the deadline in its errors.
// teamOptions are the options of every team the shim brings up: its
// logger and, from NVLS_WORKSPACE, the data area of each rank's workspace
// (ncclMemAlloc's pool).
func teamOptions() ([]team.Option, error) {
	opts := []team.Option{team.WithLogger(shim.log)}
	n, set, err := env.OS.Size(env.Workspace)
	if err != nil {
		return nil, &callError{code: nccl.InvalidArgument, err: err}
	}
	if set {
		opts = append(opts, team.WithWorkspaceSize(n))
	}
	return opts, nil
}

func setupContext() (context.Context, context.CancelFunc, time.Duration, error) {
	d, set, err := env.OS.Duration(env.SetupTimeout)
	if err != nil {
		return nil, nil, 0, &callError{code: nccl.InvalidArgument, err: err}
	}
	src := "the default"
	if set {
		src = env.OS.DurationSetting(env.SetupTimeout, d)
	} else {
		d = team.DefaultSetupTimeout
	}
	ctx, cancel := deadline.WithTimeout(context.Background(), d, "setup deadline", src)
	return ctx, cancel, d, nil
}

// currentDevice is the device whose primary context is current on this
// thread (what cudaSetDevice made current), device 0 where none is.
func currentDevice(d cuda.Driver) (cuda.Device, error) {
	cur, err := d.CtxGetCurrent()
	if err != nil || cur == 0 {
		return 0, err
	}
	n, err := d.DeviceCount()
	if err != nil {
		return 0, err
	}
	for i := range n {
		dev, err := d.DeviceGet(i)
		if err != nil {
			return 0, err
		}
		pc, err := d.PrimaryCtxRetain(dev)
		if err != nil {
			continue
		}
		_ = d.PrimaryCtxRelease(dev)
		if pc == cur {
			return dev, nil
		}
	}
	return 0, fail(nccl.InvalidUsage, "libnccl-nvls: the current CUDA context is no device's primary context (nvls runs in the primary contexts, as the CUDA runtime does)")
}

// levelInfo is NVLS_DEBUG=INFO's level.
const levelInfo = slog.LevelInfo

// tid is the calling OS thread: a cgo call stays on the caller's thread.
func tid() int { return syscall.Gettid() }

// job is one nvls team and its collectives, with its local ranks' comms:
// one rank for ncclCommInitRank, several for ncclCommInitAll.
type job struct {
	t     *team.Team
	c     *collectives.Comm
	boot  *sock.Bootstrap // nil for InitAll (in-process)
	ranks []*rankComm     // by local rank

	mu     sync.Mutex
	rounds map[uint64]*round // calls whose local ranks' parts are coming in
	parts  []uint64          // per local rank: parts given so far
	live   int               // ranks not yet destroyed
	// closing: every rank was destroyed while ncclMemAlloc memory of the
	// team was still out; the last ncclMemFree of it closes the team.
	closing bool
}

// rankComm is what an ncclComm_t stands for: one rank of a job.
type rankComm struct {
	handle unsafe.Pointer // the ncclComm_t given out
	j      *job
	local  int
	rank   int
	nranks int
	dev    cuda.Device
	real   unsafe.Pointer // the real NCCL's ncclComm_t beside it, or nil
	// blocking is false for a non-blocking config (ncclInProgress).
	blocking bool
	// ready closes when the bring-up ended; initErr is its failure.
	ready   chan struct{}
	initErr error

	mu        sync.Mutex
	streams   map[cuda.Stream]bool // used, for Finalize
	ran, fwd  int
	fwdWhy    map[string]int
	asyncErr  error
	finalized bool
	aborted   bool
	regs      map[uintptr]uint64 // registered buffers (ncclCommRegister, windows)
}

func lookup(h unsafe.Pointer) (*rankComm, error) {
	shim.mu.Lock()
	defer shim.mu.Unlock()
	c := shim.comms[h]
	if c == nil {
		return nil, fail(nccl.InvalidArgument, "libnccl-nvls: %p is not a communicator of libnccl-nvls (destroyed, or never made)", h)
	}
	return c, nil
}

// count records a call that ran here or was forwarded (why).
func (c *rankComm) count(fwd bool, why string) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if !fwd {
		c.ran++
		return
	}
	c.fwd++
	if c.fwdWhy == nil {
		c.fwdWhy = map[string]int{}
	}
	c.fwdWhy[why]++
}
