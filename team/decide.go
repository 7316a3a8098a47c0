package team

import (
	"errors"
	"fmt"
	"strings"

	"github.com/nvls-go/nvls/cuda"
	"github.com/nvls-go/nvls/internal/kabi"
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
	// device (without WithSharedDevices).
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
	// SharedDevices: the rank was given WithSharedDevices.
	SharedDevices bool `json:",omitempty"`
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
	// onDevice is, per rank, how many ranks run on its device (1 unless
	// WithSharedDevices let ranks share one).
	onDevice []int
}

// decide checks the gathered facts and picks the transport. It is a pure
// function of its arguments, so every rank reaches the same answer. Its
// errors start with "team: ".
func decide(all []facts, inProcess bool) (decision, error) {
	n := len(all)
	if n == 0 || n > kabi.MaxRanks {
		return decision{}, fmt.Errorf("%w: %d ranks (1 to %d)", ErrBadDevices, n, kabi.MaxRanks)
	}
	groups, err := deviceGroups(all)
	if err != nil {
		return decision{}, err
	}
	dec := decision{smCount: -1, gran: 1, onDevice: make([]int, n)}
	for _, g := range groups {
		for _, r := range g {
			dec.onDevice[r] = len(g)
		}
	}
	posix := true
	for _, f := range all {
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
	dec.transport, dec.reason, dec.auto, err = pickTransport(all, dec.handles, groups)
	return dec, err
}

// pickTransport: explicit requests (option or NVLS_TRANSPORT) must agree
// and auto ranks follow them; the safety switch wins over any; else
// multicast where every device can use it with handles and no device is
// shared. auto says that multicast was chosen automatically.
func pickTransport(all []facts, handles cuda.HandleType, groups [][]int) (t Transport, reason string, auto bool, err error) {
	n := len(all)
	mcReq, ucReq := requests(all, Multicast), requests(all, Unicast)
	if mcReq != "" && ucReq != "" {
		return t, "", false, fmt.Errorf("%w: multicast asked by %s, unicast by %s", ErrTransportConflict, mcReq, ucReq)
	}
	var off, sharing []int
	var unsupported []string
	var why []error
	for _, f := range all {
		if f.NVLSOff {
			off = append(off, f.Rank)
		}
		if f.SharedDevices {
			sharing = append(sharing, f.Rank)
		}
		if err := f.Support.Usable(handles); err != nil {
			unsupported = append(unsupported, f.where())
			why = append(why, err)
		}
	}
	switch {
	case mcReq != "" && len(off) > 0:
		return t, "", false, fmt.Errorf("team: multicast asked by %s, but %s=0 %s switches multicast off; the safety switch wins over any request (unset it, or ask for unicast): %w",
			mcReq, cuda.EnvNVLSEnable, onRanks(off, n), cuda.ErrMulticastDisabled)
	case mcReq != "" && len(sharing) > 0:
		return t, "", false, fmt.Errorf("%w: multicast asked by %s, but WithSharedDevices %s lets ranks share a device, and a device joins a multicast object once: a team with shared devices is unicast",
			ErrMulticastUnsupported, mcReq, onRanks(sharing, n))
	case mcReq != "" && len(unsupported) > 0:
		return t, "", false, fmt.Errorf("%w: multicast asked by %s, but %s cannot use it: %w",
			ErrMulticastUnsupported, mcReq, strings.Join(unsupported, ", "), errors.Join(why...))
	case mcReq != "":
		return Multicast, "asked by " + mcReq, false, nil
	case ucReq != "":
		return Unicast, "asked by " + ucReq, false, nil
	case len(sharing) > 0:
		return Unicast, "auto: " + sharingReason(all, groups, sharing), false, nil
	case len(off) > 0:
		return Unicast, fmt.Sprintf("multicast switched off by %s=0 %s", cuda.EnvNVLSEnable, onRanks(off, n)), false, nil
	case len(unsupported) > 0:
		return Unicast, fmt.Sprintf("auto: multicast unavailable on %s: %v", unsupported[0], why[0]), false, nil
	}
	return Multicast, "auto: " + allSupport(n), true, nil
}

// deviceGroups groups the ranks by device (PCI bus id, which names one
// GPU in every process, where ordinals need not), in order of their first
// rank. A device of several ranks is an error unless every one of them
// was given WithSharedDevices.
func deviceGroups(all []facts) ([][]int, error) {
	var groups [][]int
	at := map[string]int{}
	for r, f := range all {
		g, ok := at[f.PCI]
		if !ok {
			g = len(groups)
			at[f.PCI] = g
			groups = append(groups, nil)
		}
		groups[g] = append(groups[g], r)
	}
	for _, g := range groups {
		if len(g) < 2 {
			continue
		}
		var without []int
		for _, r := range g {
			if !all[r].SharedDevices {
				without = append(without, r)
			}
		}
		if len(without) > 0 {
			f := all[g[0]]
			return nil, fmt.Errorf("%w: ranks %v use the same GPU (device %d, %s); to run several ranks on one GPU (development and testing), pass WithSharedDevices on every one of them (rank(s) %v did not)",
				ErrBadDevices, g, f.Device, f.PCI, without)
		}
	}
	return groups, nil
}

// sharingReason says why a team with WithSharedDevices is unicast.
func sharingReason(all []facts, groups [][]int, sharing []int) string {
	var parts []string
	for _, g := range groups {
		if len(g) > 1 {
			f := all[g[0]]
			parts = append(parts, fmt.Sprintf("ranks %v on device %d (%s)", g, f.Device, f.PCI))
		}
	}
	if len(parts) == 0 {
		return fmt.Sprintf("WithSharedDevices %s: a team that may share devices never uses multicast (no device is shared)", onRanks(sharing, len(all)))
	}
	return fmt.Sprintf("shared devices (WithSharedDevices): %s; a device joins a multicast object once, so a team with shared devices is unicast", strings.Join(parts, ", "))
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

// allSupport says that every one of n devices supports multicast.
func allSupport(n int) string {
	if n == 1 {
		return "the device supports multicast"
	}
	return fmt.Sprintf("all %d devices support multicast", n)
}
