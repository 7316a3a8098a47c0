//go:build linux

package handletype

import (
	"bufio"
	"encoding/binary"
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strconv"
	"strings"
	"syscall"

	"github.com/nvls-go/nvls/cuda"
)

// IMEXDevice is the character device's name in /proc/devices.
const IMEXDevice = "nvidia-caps-imex-channels"

// Default locations.
const (
	DefaultProcDevices = "/proc/devices"
	DefaultChannelDir  = "/dev/nvidia-caps-imex-channels"
)

// ErrNoIMEX: no usable IMEX channel. The error text says what is missing.
var ErrNoIMEX = errors.New("handletype: no usable IMEX channel")

// ErrMultiNode: the ranks span several hosts and cannot use fabric
// handles, so they have no way to share handles at all.
var ErrMultiNode = errors.New("handletype: ranks on several hosts need fabric handles")

// Probe says where to look; the zero value looks in the usual places.
type Probe struct {
	// ProcDevices is the device list (default /proc/devices).
	ProcDevices string
	// ChannelDir holds the channel nodes (default
	// /dev/nvidia-caps-imex-channels).
	ChannelDir string
	// NoTrialExport skips the trial fabric export (for callers that
	// cannot allocate device memory at this point).
	NoTrialExport bool
}

func (p Probe) procDevices() string {
	if p.ProcDevices == "" {
		return DefaultProcDevices
	}
	return p.ProcDevices
}

func (p Probe) channelDir() string {
	if p.ChannelDir == "" {
		return DefaultChannelDir
	}
	return p.ChannelDir
}

// Major returns the major number /proc/devices lists for the IMEX
// channels among the character devices.
func (p Probe) Major() (uint32, error) {
	f, err := os.Open(p.procDevices())
	if err != nil {
		return 0, fmt.Errorf("%w: %w", ErrNoIMEX, err)
	}
	defer f.Close()
	sc := bufio.NewScanner(f)
	char := false
	for sc.Scan() {
		line := strings.TrimSpace(sc.Text())
		switch {
		case line == "Character devices:":
			char = true
			continue
		case strings.HasSuffix(line, "devices:"):
			char = false
			continue
		}
		fields := strings.Fields(line)
		if !char || len(fields) != 2 || fields[1] != IMEXDevice {
			continue
		}
		m, err := strconv.ParseUint(fields[0], 10, 32)
		if err != nil {
			return 0, fmt.Errorf("%w: %s: bad line %q", ErrNoIMEX, p.procDevices(), line)
		}
		return uint32(m), nil
	}
	if err := sc.Err(); err != nil {
		return 0, fmt.Errorf("%w: %s: %w", ErrNoIMEX, p.procDevices(), err)
	}
	return 0, fmt.Errorf("%w: %s does not list %s (no IMEX driver support loaded)", ErrNoIMEX, p.procDevices(), IMEXDevice)
}

// Channel returns the path of a usable channel node: channel0 if it is
// usable, else the first other channelN (by N) that is. A node is usable
// when it opens for reading and, being a character device, has the major
// number /proc/devices lists.
func (p Probe) Channel() (string, error) {
	major, err := p.Major()
	if err != nil {
		return "", err
	}
	dir := p.channelDir()
	entries, err := os.ReadDir(dir)
	if err != nil {
		return "", fmt.Errorf("%w: %w (no channel nodes created)", ErrNoIMEX, err)
	}
	type cand struct {
		n    int
		name string
	}
	var cands []cand
	for _, e := range entries {
		if n, ok := strings.CutPrefix(e.Name(), "channel"); ok {
			if v, err := strconv.Atoi(n); err == nil && v >= 0 {
				cands = append(cands, cand{v, e.Name()})
			}
		}
	}
	if len(cands) == 0 {
		return "", fmt.Errorf("%w: %s holds no channelN node", ErrNoIMEX, dir)
	}
	slices.SortFunc(cands, func(a, b cand) int { return a.n - b.n })
	var why []string
	for _, c := range cands {
		path := filepath.Join(dir, c.name)
		if err := usable(path, major); err != nil {
			why = append(why, err.Error())
			continue
		}
		return path, nil
	}
	return "", fmt.Errorf("%w: %s", ErrNoIMEX, strings.Join(why, "; "))
}

func usable(path string, major uint32) error {
	f, err := os.OpenFile(path, os.O_RDONLY, 0)
	if err != nil {
		return err
	}
	defer f.Close()
	var st syscall.Stat_t
	if err := syscall.Fstat(int(f.Fd()), &st); err != nil {
		return fmt.Errorf("%s: %w", path, err)
	}
	if st.Mode&syscall.S_IFMT == syscall.S_IFCHR {
		if m := devMajor(st.Rdev); m != major {
			return fmt.Errorf("%s: major %d, but /proc/devices lists %s as %d", path, m, IMEXDevice, major)
		}
	}
	return nil
}

// devMajor is Linux's major(): bits 8-19 and 32-43 of the device number.
func devMajor(rdev uint64) uint32 {
	return uint32((rdev>>8)&0xfff) | uint32((rdev>>32)&^0xfff)
}

// Support is one rank's answer.
type Support struct {
	// OK: this rank can use fabric handles.
	OK bool
	// Channel is the IMEX channel node found (when the check got there).
	Channel string
	// Reason says why OK is what it is.
	Reason string
}

// Check tells whether rank's device dev can share handles as fabric
// handles. It makes no multicast call. The trial export runs on a
// goroutine locked to its thread with dev's primary context current (the
// thread's previous context is restored).
func Check(d cuda.Driver, dev cuda.Device, p Probe) Support {
	v, err := d.DeviceAttribute(cuda.AttrHandleTypeFabricSupported, dev)
	switch {
	case err != nil:
		return Support{Reason: fmt.Sprintf("device %d: fabric handle support unknown: %v", dev, err)}
	case v == 0:
		return Support{Reason: fmt.Sprintf("device %d reports no fabric handle support", dev)}
	}
	ch, err := p.Channel()
	if err != nil {
		return Support{Reason: fmt.Sprintf("device %d supports fabric handles, but %v", dev, err)}
	}
	if !p.NoTrialExport {
		err := trialExport(d, dev)
		switch {
		case errors.Is(err, errTrialCreate) && errors.Is(err, cuda.ErrNotPermitted):
			// The attribute says yes, but the driver does not let this
			// process make fabric-exportable memory (seen on an H100
			// without an IMEX channel for the process).
			return Support{Channel: ch, Reason: fmt.Sprintf("device %d reports fabric handles and %s opens, but the driver does not permit memory exportable as fabric handles: %v", dev, ch, err)}
		case err != nil:
			return Support{Channel: ch, Reason: fmt.Sprintf("device %d supports fabric handles and %s opens, but a trial export failed: %v", dev, ch, err)}
		}
	}
	return Support{OK: true, Channel: ch, Reason: fmt.Sprintf("device %d supports fabric handles, IMEX channel %s usable", dev, ch)}
}

// errTrialCreate marks a trial export that failed at cuMemCreate.
var errTrialCreate = errors.New("trial cuMemCreate of a fabric-exportable granule")

// trialExport creates one granule with the fabric handle type, exports it
// and releases it.
func trialExport(d cuda.Driver, dev cuda.Device) (err error) {
	done := make(chan error, 1)
	go func() {
		runtime.LockOSThread()
		defer runtime.UnlockOSThread()
		done <- func() (err error) {
			prev, err := d.CtxGetCurrent()
			if err != nil {
				return err
			}
			ctx, err := d.PrimaryCtxRetain(dev)
			if err != nil {
				return err
			}
			defer func() { err = errors.Join(err, d.PrimaryCtxRelease(dev)) }()
			if err := d.CtxSetCurrent(ctx); err != nil {
				return err
			}
			defer func() { err = errors.Join(err, d.CtxSetCurrent(prev)) }()
			prop := cuda.DeviceAllocationProp(dev, cuda.HandleFabric)
			g, err := d.MemGetAllocationGranularity(&prop, cuda.GranularityMinimum)
			if err != nil {
				return err
			}
			h, err := d.MemCreate(g, &prop)
			if err != nil {
				return fmt.Errorf("%w: %w", errTrialCreate, err)
			}
			defer func() { err = errors.Join(err, d.MemRelease(h)) }()
			_, err = d.MemExportToShareableHandle(h, cuda.HandleFabric)
			return err
		}()
	}()
	return <-done
}

// Decide combines every rank's Support (indexed by rank) on hosts
// distinct hosts: fabric handles when every rank can use them, else POSIX
// file descriptors, which need a single host (ErrMultiNode otherwise).
// The reason names the first rank that cannot, and why.
func Decide(all []Support, hosts int) (cuda.HandleType, string, error) {
	if len(all) == 0 {
		return cuda.HandleNone, "", errors.New("handletype: no ranks")
	}
	for r, s := range all {
		if s.OK {
			continue
		}
		reason := fmt.Sprintf("rank %d: %s", r, s.Reason)
		if hosts > 1 {
			return cuda.HandleNone, reason, fmt.Errorf("%w: %d hosts, and %s", ErrMultiNode, hosts, reason)
		}
		return cuda.HandlePosixFD, reason, nil
	}
	return cuda.HandleFabric, fmt.Sprintf("every rank's device supports fabric handles and has a usable IMEX channel (rank 0: %s)", all[0].Channel), nil
}

// MarshalBinary encodes s for the bootstrap's all-gather.
func (s Support) MarshalBinary() ([]byte, error) {
	b := []byte{0}
	if s.OK {
		b[0] = 1
	}
	b = binary.AppendUvarint(b, uint64(len(s.Channel)))
	b = append(b, s.Channel...)
	return append(b, s.Reason...), nil
}

// UnmarshalBinary decodes what MarshalBinary made.
func (s *Support) UnmarshalBinary(b []byte) error {
	if len(b) < 2 || b[0] > 1 {
		return fmt.Errorf("handletype: bad support record (%d bytes)", len(b))
	}
	n, k := binary.Uvarint(b[1:])
	if k <= 0 || n > uint64(len(b)-1-k) {
		return fmt.Errorf("handletype: bad support record: channel length")
	}
	rest := b[1+k:]
	*s = Support{OK: b[0] == 1, Channel: string(rest[:n]), Reason: string(rest[n:])}
	return nil
}
