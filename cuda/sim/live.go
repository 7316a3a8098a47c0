package sim

import (
	"errors"
	"fmt"
	"strings"
)

// Live counts the resources a node holds for its callers.
type Live struct {
	// Allocations: physical allocations (cuMemCreate) still alive, held
	// by a handle, a mapping, a multicast bind or an open exported FD.
	Allocations int
	// Handles: allocation and multicast handles the caller has not
	// released (created, imported or retained).
	Handles int
	// Reservations: cuMemAddressReserve ranges not freed.
	Reservations int
	// Mappings: cuMemMap mappings not unmapped.
	Mappings int
	// MemAllocs: cuMemAlloc and cuMemAllocManaged allocations not freed.
	MemAllocs int
	// HostAllocs: cuMemHostAlloc allocations not freed (cuMemFreeHost).
	HostAllocs int
	// MulticastObjects: multicast objects alive; Binds: their binds.
	MulticastObjects int
	Binds            int
	Streams          int
	Events           int
	Modules          int
	Graphs           int
	GraphExecs       int
	// RetainedContexts: primary context references (retains minus
	// releases, summed over devices).
	RetainedContexts int
	// ExportedFDs: exported POSIX FDs (or dups of them) still open.
	ExportedFDs int
	// DeviceBytes: device memory in use, by device.
	DeviceBytes []uint64
}

func (l Live) String() string {
	var parts []string
	add := func(v int, what string) {
		if v != 0 {
			parts = append(parts, fmt.Sprintf("%d %s", v, what))
		}
	}
	add(l.Allocations, "allocations")
	add(l.Handles, "handles")
	add(l.Reservations, "reservations")
	add(l.Mappings, "mappings")
	add(l.MemAllocs, "cuMemAlloc allocations")
	add(l.HostAllocs, "cuMemHostAlloc allocations")
	add(l.MulticastObjects, "multicast objects")
	add(l.Binds, "multicast binds")
	add(l.Streams, "streams")
	add(l.Events, "events")
	add(l.Modules, "modules")
	add(l.Graphs, "graphs")
	add(l.GraphExecs, "graph execs")
	add(l.RetainedContexts, "primary context retains")
	add(l.ExportedFDs, "exported FDs open")
	for d, b := range l.DeviceBytes {
		if b != 0 {
			parts = append(parts, fmt.Sprintf("%d bytes on device %d", b, d))
		}
	}
	if len(parts) == 0 {
		return "nothing"
	}
	return strings.Join(parts, ", ")
}

// Live returns the counts of live resources. Exported FDs closed since the
// last look are noticed (and their references dropped) here.
func (n *Node) Live() Live {
	n.mu.Lock()
	defer n.mu.Unlock()
	n.sweepExportsLocked()
	var l Live
	memAllocs := map[*physAlloc]bool{}
	for _, a := range n.memAlloc {
		memAllocs[a.alloc] = true
	}
	l.MemAllocs = len(n.memAlloc)
	l.HostAllocs = len(n.hostAllocs)
	for _, a := range n.allocs {
		if !memAllocs[a] {
			l.Allocations++
		}
	}
	mcs := map[*mcObject]bool{}
	for _, h := range n.handles {
		if h.userRefs > 0 {
			l.Handles++
		}
		if h.mc != nil {
			mcs[h.mc] = true
		}
	}
	for _, e := range n.exports {
		if e.posix {
			l.ExportedFDs++
			if e.mc != nil {
				mcs[e.mc] = true
			}
		}
	}
	for o := range mcs {
		o.mu.RLock()
		l.Binds += len(o.binds)
		o.mu.RUnlock()
	}
	l.MulticastObjects = n.mcLive
	for _, r := range n.reservations {
		if !r.internal {
			l.Reservations++
		}
	}
	for _, m := range n.mappings {
		if !m.all {
			l.Mappings++
		}
	}
	l.Streams = len(n.streams)
	l.Events = len(n.events)
	l.Modules = len(n.modules)
	l.Graphs = len(n.graphs)
	l.GraphExecs = len(n.execs)
	for _, c := range n.ctxs {
		l.RetainedContexts += c.refs
	}
	l.DeviceBytes = append([]uint64(nil), n.used...)
	return l
}

// ErrLeak is what CheckNoLeaks returns (wrapped) when something is left.
var ErrLeak = errors.New("sim: resources leaked")

// CheckNoLeaks returns nil when the node holds nothing for its callers,
// and otherwise an error (matching ErrLeak) naming what is left.
func (n *Node) CheckNoLeaks() error {
	l := n.Live()
	if s := l.String(); s != "nothing" {
		return fmt.Errorf("%w: %s", ErrLeak, s)
	}
	return nil
}
