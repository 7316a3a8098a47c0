package sim

import (
	"fmt"
	"time"
)

// Config describes a simulated node. The zero value of every field means
// "the default" (see New), so tests set only what they vary.
type Config struct {
	// Devices is the number of GPUs (default 4).
	Devices int
	// MemoryPerDevice is each device's memory in bytes (default 1 GiB).
	// cuMemCreate, cuMemAlloc and cuMemAllocManaged fail with
	// CUDA_ERROR_OUT_OF_MEMORY past it. Backing store is allocated lazily,
	// so a large value costs nothing until it is written.
	MemoryPerDevice uint64
	// AllocGranularityMin and AllocGranularityRecommended are what
	// cuMemGetAllocationGranularity reports (default 2 MiB and 2 MiB).
	AllocGranularityMin         uint64
	AllocGranularityRecommended uint64
	// MulticastGranularityMin and MulticastGranularityRecommended are what
	// cuMulticastGetGranularity reports (default 2 MiB and 2 MiB; a real
	// H100/H200 reports 2 MiB minimum and a larger recommended value).
	MulticastGranularityMin         uint64
	MulticastGranularityRecommended uint64
	// NoMulticast lists devices that do not support multicast
	// (CU_DEVICE_ATTRIBUTE_MULTICAST_SUPPORTED = 0). MulticastAllOff turns
	// it off everywhere: then cuMulticastCreate returns
	// CUDA_ERROR_NOT_SUPPORTED.
	NoMulticast     []int
	MulticastAllOff bool
	// NoPosixFD turns off POSIX file descriptor handles (always off on
	// Windows, which has none); Fabric turns on fabric handles (off by
	// default, as on a single HGX node without IMEX).
	NoPosixFD bool
	Fabric    bool
	// FabricNotPermitted: the devices report fabric handles (with
	// Fabric), but cuMemCreate and cuMulticastCreate asked for fabric
	// handles fail with CUDA_ERROR_NOT_PERMITTED, as on a node where the
	// process has no IMEX channel (an H100 with driver 580.159.04 did).
	FabricNotPermitted bool
	// NoVMM turns off the virtual memory management API
	// (CU_DEVICE_ATTRIBUTE_VIRTUAL_MEMORY_MANAGEMENT_SUPPORTED = 0).
	NoVMM bool
	// Compression turns on generic compression support; without it a
	// compression request in cuMemCreate is silently dropped.
	Compression bool
	// NoPeer lists device pairs {a, b} that cannot access each other
	// (both directions). By default every pair can.
	NoPeer [][2]int
	// DriverVersion is cuDriverGetVersion's answer (default 13000).
	DriverVersion int
	// DeviceName is every device's name (default "Simulated H200").
	DeviceName string
	// SMCount is CU_DEVICE_ATTRIBUTE_MULTIPROCESSOR_COUNT (default 132).
	SMCount int
	// MaxMulticastObjects is how many multicast objects may exist at once
	// (default 128); cuMulticastCreate fails with OUT_OF_MEMORY past it.
	MaxMulticastObjects int
	// Cliques partitions the devices into NVLink cliques, each device in
	// exactly one (default: one clique of every device). A multicast
	// object's devices must share a clique: cuMulticastAddDevice of a
	// device of another clique than those added before fails with
	// CUDA_ERROR_INVALID_DEVICE, every device still reporting
	// MULTICAST_SUPPORTED = 1. With CliqueAtMap the add succeeds and the
	// cuMemMap of the object fails instead (the driver documents that
	// either call may).
	Cliques     [][]int
	CliqueAtMap bool
	// MulticastWait bounds how long a bind or a mapping of a multicast
	// object waits for the object's last device to be added (default
	// DefaultMulticastWait). The driver waits as long as it takes; the
	// simulator then fails the call with CUDA_ERROR_TIMEOUT, so that a
	// test whose add never comes ends.
	MulticastWait time.Duration
	// CallLogLimit caps the call log that Calls returns (default 1<<17
	// entries); calls past it are counted but not kept.
	CallLogLimit int
	// Kernels are the kernels this node runs, by entry name: a PTX image
	// loads (ModuleLoadData) only where every .entry has one here. nvls's
	// own come with package simnode's New (github.com/nvls-go/nvls/simnode),
	// so that no production binary links them. The map is read, never
	// written.
	Kernels map[string]KernelFunc
}

// Defaults.
const (
	DefaultDevices             = 4
	DefaultMemoryPerDevice     = 1 << 30
	DefaultGranularity         = 2 << 20
	DefaultDriverVersion       = 13000
	DefaultDeviceName          = "Simulated H200"
	DefaultSMCount             = 132
	DefaultMaxMulticastObjects = 128
	DefaultCallLogLimit        = 1 << 17
	// DefaultMulticastWait is longer than package team's default setup
	// timeout, so that a team whose rank never adds its device is named
	// by the team's deadline before the simulator gives up.
	DefaultMulticastWait = 2 * time.Minute
)

func (c Config) withDefaults() Config {
	if !posixFDs {
		c.NoPosixFD = true
	}
	if c.Devices <= 0 {
		c.Devices = DefaultDevices
	}
	if c.MemoryPerDevice == 0 {
		c.MemoryPerDevice = DefaultMemoryPerDevice
	}
	if c.AllocGranularityMin == 0 {
		c.AllocGranularityMin = DefaultGranularity
	}
	if c.AllocGranularityRecommended == 0 {
		c.AllocGranularityRecommended = c.AllocGranularityMin
	}
	if c.MulticastGranularityMin == 0 {
		c.MulticastGranularityMin = DefaultGranularity
	}
	if c.MulticastGranularityRecommended == 0 {
		c.MulticastGranularityRecommended = c.MulticastGranularityMin
	}
	if c.DriverVersion == 0 {
		c.DriverVersion = DefaultDriverVersion
	}
	if c.DeviceName == "" {
		c.DeviceName = DefaultDeviceName
	}
	if c.SMCount == 0 {
		c.SMCount = DefaultSMCount
	}
	if c.MaxMulticastObjects == 0 {
		c.MaxMulticastObjects = DefaultMaxMulticastObjects
	}
	if c.CallLogLimit == 0 {
		c.CallLogLimit = DefaultCallLogLimit
	}
	if c.MulticastWait <= 0 {
		c.MulticastWait = DefaultMulticastWait
	}
	return c
}

func (c Config) validate() error {
	for _, g := range []uint64{c.AllocGranularityMin, c.AllocGranularityRecommended, c.MulticastGranularityMin, c.MulticastGranularityRecommended} {
		if g&(g-1) != 0 {
			return fmt.Errorf("sim: granularity %d is not a power of two", g)
		}
	}
	if c.AllocGranularityRecommended%c.AllocGranularityMin != 0 || c.MulticastGranularityRecommended%c.MulticastGranularityMin != 0 {
		return fmt.Errorf("sim: recommended granularity must be a multiple of the minimum")
	}
	for _, d := range c.NoMulticast {
		if d < 0 || d >= c.Devices {
			return fmt.Errorf("sim: NoMulticast device %d out of range", d)
		}
	}
	if len(c.Cliques) > 0 {
		seen := make([]bool, c.Devices)
		for _, cl := range c.Cliques {
			for _, d := range cl {
				if d < 0 || d >= c.Devices {
					return fmt.Errorf("sim: Cliques device %d out of range", d)
				}
				if seen[d] {
					return fmt.Errorf("sim: Cliques lists device %d twice", d)
				}
				seen[d] = true
			}
		}
		for d, ok := range seen {
			if !ok {
				return fmt.Errorf("sim: Cliques leaves out device %d", d)
			}
		}
	}
	for _, p := range c.NoPeer {
		if p[0] < 0 || p[0] >= c.Devices || p[1] < 0 || p[1] >= c.Devices {
			return fmt.Errorf("sim: NoPeer pair %v out of range", p)
		}
	}
	return nil
}
