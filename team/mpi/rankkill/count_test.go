//go:build mpi

package rankkill

import (
	"fmt"
	"sort"
	"strings"
	"sync"
	"unsafe"

	"github.com/nvls-go/nvls/cuda"
)

// countDriver counts what the code above it holds of the driver: every
// object a create or import call returned and no destroy or release has
// given back yet, by kind. The driver cannot list a process's
// allocations, handles or graphs, so the count is taken at the calls;
// after Close every kind must be back to zero (the primary context
// reference the test holds itself is not counted).
type countDriver struct {
	cuda.Driver
	mu   sync.Mutex
	live map[string]map[uint64]int
}

func newCountDriver(d cuda.Driver) *countDriver {
	return &countDriver{Driver: d, live: map[string]map[uint64]int{}}
}

func (c *countDriver) add(kind string, id uint64, err error) {
	if err != nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	m := c.live[kind]
	if m == nil {
		m = map[uint64]int{}
		c.live[kind] = m
	}
	m[id]++
}

func (c *countDriver) drop(kind string, id uint64, err error) {
	if err != nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if m := c.live[kind]; m[id] > 1 {
		m[id]--
	} else {
		delete(m, id)
	}
}

// Live is what is held now, e.g. "2 stream(s), 1 graph exec(s)", or
// "nothing".
func (c *countDriver) Live() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var parts []string
	for kind, m := range c.live {
		n := 0
		for _, k := range m {
			n += k
		}
		if n > 0 {
			parts = append(parts, fmt.Sprintf("%d %s(s)", n, kind))
		}
	}
	if len(parts) == 0 {
		return "nothing"
	}
	sort.Strings(parts)
	return strings.Join(parts, ", ")
}

// Held is the count of objects held, all kinds together.
func (c *countDriver) Held() int {
	c.mu.Lock()
	defer c.mu.Unlock()
	n := 0
	for _, m := range c.live {
		for _, k := range m {
			n += k
		}
	}
	return n
}

func (c *countDriver) MemCreate(size uint64, prop *cuda.AllocationProp) (cuda.MemHandle, error) {
	h, err := c.Driver.MemCreate(size, prop)
	c.add("memory handle", uint64(h), err)
	return h, err
}

func (c *countDriver) MemImportFromShareableHandle(sh cuda.ShareableHandle) (cuda.MemHandle, error) {
	h, err := c.Driver.MemImportFromShareableHandle(sh)
	c.add("memory handle", uint64(h), err)
	return h, err
}

func (c *countDriver) MemRetainAllocationHandle(p cuda.DevicePtr) (cuda.MemHandle, error) {
	h, err := c.Driver.MemRetainAllocationHandle(p)
	c.add("memory handle", uint64(h), err)
	return h, err
}

func (c *countDriver) MemRelease(h cuda.MemHandle) error {
	err := c.Driver.MemRelease(h)
	c.drop("memory handle", uint64(h), err)
	return err
}

func (c *countDriver) MemAddressReserve(size, align uint64, addr cuda.DevicePtr) (cuda.DevicePtr, error) {
	p, err := c.Driver.MemAddressReserve(size, align, addr)
	c.add("address reservation", uint64(p), err)
	return p, err
}

func (c *countDriver) MemAddressFree(p cuda.DevicePtr, size uint64) error {
	err := c.Driver.MemAddressFree(p, size)
	c.drop("address reservation", uint64(p), err)
	return err
}

func (c *countDriver) MemMap(p cuda.DevicePtr, size, offset uint64, h cuda.MemHandle) error {
	err := c.Driver.MemMap(p, size, offset, h)
	c.add("mapping", uint64(p), err)
	return err
}

func (c *countDriver) MemUnmap(p cuda.DevicePtr, size uint64) error {
	err := c.Driver.MemUnmap(p, size)
	c.drop("mapping", uint64(p), err)
	return err
}

func (c *countDriver) MemAlloc(size uint64) (cuda.DevicePtr, error) {
	p, err := c.Driver.MemAlloc(size)
	c.add("cuMemAlloc allocation", uint64(p), err)
	return p, err
}

func (c *countDriver) MemFree(p cuda.DevicePtr) error {
	err := c.Driver.MemFree(p)
	c.drop("cuMemAlloc allocation", uint64(p), err)
	return err
}

func (c *countDriver) MemHostAlloc(size uint64, flags uint32) (unsafe.Pointer, error) {
	p, err := c.Driver.MemHostAlloc(size, flags)
	c.add("host allocation", uint64(uintptr(p)), err)
	return p, err
}

func (c *countDriver) MemFreeHost(p unsafe.Pointer) error {
	err := c.Driver.MemFreeHost(p)
	c.drop("host allocation", uint64(uintptr(p)), err)
	return err
}

func (c *countDriver) StreamCreate(flags uint32) (cuda.Stream, error) {
	s, err := c.Driver.StreamCreate(flags)
	c.add("stream", uint64(s), err)
	return s, err
}

func (c *countDriver) StreamDestroy(s cuda.Stream) error {
	err := c.Driver.StreamDestroy(s)
	c.drop("stream", uint64(s), err)
	return err
}

func (c *countDriver) EventCreate(flags uint32) (cuda.Event, error) {
	e, err := c.Driver.EventCreate(flags)
	c.add("event", uint64(e), err)
	return e, err
}

func (c *countDriver) EventDestroy(e cuda.Event) error {
	err := c.Driver.EventDestroy(e)
	c.drop("event", uint64(e), err)
	return err
}

func (c *countDriver) ModuleLoadData(image []byte) (cuda.Module, error) {
	m, err := c.Driver.ModuleLoadData(image)
	c.add("module", uint64(m), err)
	return m, err
}

func (c *countDriver) ModuleUnload(m cuda.Module) error {
	err := c.Driver.ModuleUnload(m)
	c.drop("module", uint64(m), err)
	return err
}

func (c *countDriver) StreamEndCapture(s cuda.Stream) (cuda.Graph, error) {
	g, err := c.Driver.StreamEndCapture(s)
	if g != 0 {
		c.add("graph", uint64(g), nil)
	}
	return g, err
}

func (c *countDriver) GraphDestroy(g cuda.Graph) error {
	err := c.Driver.GraphDestroy(g)
	c.drop("graph", uint64(g), err)
	return err
}

func (c *countDriver) GraphInstantiate(g cuda.Graph) (cuda.GraphExec, error) {
	x, err := c.Driver.GraphInstantiate(g)
	c.add("graph exec", uint64(x), err)
	return x, err
}

func (c *countDriver) GraphExecDestroy(x cuda.GraphExec) error {
	err := c.Driver.GraphExecDestroy(x)
	c.drop("graph exec", uint64(x), err)
	return err
}
