package team

import (
	"errors"
	"fmt"
	"strings"

	"github.com/nvls-go/nvls/cuda"
	"github.com/nvls-go/nvls/kernels"
	"github.com/nvls-go/nvls/multicast"
)

// Errors of the bring-up checks; match with errors.Is.
var (
	// ErrMulticastUnsupported: multicast was asked for where a device (or
	// the driver, or the handle types) does not support it.
	ErrMulticastUnsupported = errors.New("team: multicast not supported")
	// ErrTransportConflict: ranks asked for different transports.
	ErrTransportConflict = errors.New("team: ranks asked for different transports")
	// ErrNoPeerAccess: a pair of devices cannot access each other.
	ErrNoPeerAccess = errors.New("team: no peer access")
	// ErrNoVMM: a device lacks the virtual memory management API.
	ErrNoVMM = errors.New("team: virtual memory management not supported")
	// ErrBadDevices: the device list is empty, too long or repeats a
	// device.
	ErrBadDevices = errors.New("team: bad device list")
)

// facts is what one rank knows about itself at the start; every rank
// all-gathers them and decides from the same list.
type facts struct {
	Rank       int
	Device     cuda.Device
	PCI        string
	Support    multicast.Support
	SMCount    int
	AllocGran  uint64
	Request    Transport
	RequestSrc string
	NVLSOff    bool
}

func (f facts) where() string { return fmt.Sprintf("rank %d (device %d, %s)", f.Rank, f.Device, f.PCI) }

// decision is what every rank concludes from the gathered facts.
type decision struct {
	transport Transport
	reason    string
	// auto: no rank asked for a transport and multicast was chosen, so a
	// fabric failure may make the team fall back to unicast.
	auto bool
	// handles: the shareable handle types allocations and the multicast
	// object are created with.
	handles cuda.HandleType
	smCount int
	gran    uint64 // allocation granularity, lcm over ranks
}

// decide checks the gathered facts and picks the transport. It is a pure
// function of its arguments, so every rank reaches the same answer. Its
// errors start with "team: ".
func decide(all []facts, inProcess bool) (decision, error) {
	var dec decision
	n := len(all)
	if n == 0 || n > kernels.MaxRanks {
		return dec, fmt.Errorf("%w: %d ranks (1 to %d)", ErrBadDevices, n, kernels.MaxRanks)
	}
	seen := map[string]int{}
	dec.smCount = -1
	dec.gran = 1
	posix := true
	for _, f := range all {
		if r, dup := seen[f.PCI]; dup {
			return dec, fmt.Errorf("%w: rank %d and rank %d use the same GPU (%s)", ErrBadDevices, r, f.Rank, f.PCI)
		}
		seen[f.PCI] = f.Rank
		if !f.Support.VMM {
			return dec, fmt.Errorf("%w: %s", ErrNoVMM, f.where())
		}
		if dec.smCount < 0 || f.SMCount < dec.smCount {
			dec.smCount = f.SMCount
		}
		dec.gran = multicast.LCM(dec.gran, f.AllocGran)
		posix = posix && f.Support.PosixFD
	}
	switch {
	case posix:
		dec.handles = cuda.HandlePosixFD
	case inProcess:
		dec.handles = cuda.HandleNone
	default:
		for _, f := range all {
			if !f.Support.PosixFD {
				return dec, fmt.Errorf("team: %s: POSIX file descriptor handles not supported, and this team spans processes: %w", f.where(), cuda.ErrNotSupported)
			}
		}
	}

	// The request: explicit requests (option or NVLS_TRANSPORT) must
	// agree; auto ranks follow them.
	mcReq, ucReq := requests(all, Multicast), requests(all, Unicast)
	if mcReq != "" && ucReq != "" {
		return dec, fmt.Errorf("%w: multicast asked by %s, unicast by %s", ErrTransportConflict, mcReq, ucReq)
	}
	var off []int
	for _, f := range all {
		if f.NVLSOff {
			off = append(off, f.Rank)
		}
	}
	var unsupported []string
	var why []error
	for _, f := range all {
		if err := f.Support.Usable(dec.handles); err != nil {
			unsupported = append(unsupported, f.where())
			why = append(why, err)
		}
	}
	switch {
	case mcReq != "" && len(off) > 0:
		return dec, fmt.Errorf("team: multicast asked by %s, but %s=0 %s switches multicast off; the safety switch wins over any request (unset it, or ask for unicast): %w",
			mcReq, cuda.EnvNVLSEnable, onRanks(off, n), cuda.ErrMulticastDisabled)
	case mcReq != "" && len(unsupported) > 0:
		return dec, fmt.Errorf("%w: multicast asked by %s, but %s cannot use it: %w",
			ErrMulticastUnsupported, mcReq, strings.Join(unsupported, ", "), errors.Join(why...))
	case mcReq != "":
		dec.transport, dec.reason = Multicast, "asked by "+mcReq
	case ucReq != "":
		dec.transport, dec.reason = Unicast, "asked by "+ucReq
	case len(off) > 0:
		dec.transport, dec.reason = Unicast, fmt.Sprintf("multicast switched off by %s=0 %s", cuda.EnvNVLSEnable, onRanks(off, n))
	case len(unsupported) > 0:
		dec.transport, dec.reason = Unicast, fmt.Sprintf("auto: multicast unavailable on %s: %v", unsupported[0], why[0])
	default:
		dec.transport, dec.reason, dec.auto = Multicast, fmt.Sprintf("auto: all %d devices support multicast", n), true
	}
	return dec, nil
}

// requests says who asked for transport t: each source, with the ranks
// that used it ("" when none did).
func requests(all []facts, t Transport) string {
	var srcs []string
	ranks := map[string][]int{}
	for _, f := range all {
		if f.Request != t {
			continue
		}
		if _, ok := ranks[f.RequestSrc]; !ok {
			srcs = append(srcs, f.RequestSrc)
		}
		ranks[f.RequestSrc] = append(ranks[f.RequestSrc], f.Rank)
	}
	parts := make([]string, len(srcs))
	for i, s := range srcs {
		parts[i] = s
		if len(all) > 1 {
			parts[i] += " " + onRanks(ranks[s], len(all))
		}
	}
	return strings.Join(parts, ", ")
}

// onRanks is "on every rank" or "on rank(s) [...]".
func onRanks(ranks []int, n int) string {
	if len(ranks) == n {
		return "on every rank"
	}
	return fmt.Sprintf("on rank(s) %v", ranks)
}

// peerFacts is what each rank learns once it knows its peers' devices.
type peerFacts struct {
	// NoAccess lists the ranks whose device this rank's device cannot
	// access (cuDeviceCanAccessPeer).
	NoAccess []int
	// MCGran is the multicast granularity this rank's driver reports
	// (multicast transport only).
	MCGran uint64
	// MCFail is the fabric error the granularity query met, in auto
	// mode (where the team falls back to unicast instead of failing).
	MCFail *fabricWire `json:",omitempty"`
}

func checkPeers(all []facts, peers []peerFacts) error {
	var errs []error
	for r, p := range peers {
		for _, q := range p.NoAccess {
			errs = append(errs, fmt.Errorf("%s cannot access %s (cuDeviceCanAccessPeer)", all[r].where(), all[q].where()))
		}
	}
	if len(errs) > 0 {
		return fmt.Errorf("%w: %w", ErrNoPeerAccess, errors.Join(errs...))
	}
	return nil
}
