package simdiff

import (
	"errors"
	"fmt"

	"github.com/nvls-go/nvls/cuda"
	"github.com/nvls-go/nvls/cuda/sim"
	"github.com/nvls-go/nvls/kernels/simkern"
	"github.com/nvls-go/nvls/ptx"
)

// SimConfig returns a simulator configuration that describes device dev
// of d as the calls compared see it: the number of devices, memory, SM
// count, name, driver version, handle types (and, where fabric handles are
// reported, whether memory exportable as such may be made: a trial
// cuMemCreate of one granule, released), compression, multicast support
// and allocation granularity.
func SimConfig(d cuda.Driver, dev cuda.Device) (sim.Config, error) {
	c := sim.Config{Kernels: simkern.Kernels()} // the project's kernels, as Go reference kernels
	var err error
	if c.Devices, err = d.DeviceCount(); err != nil {
		return c, fmt.Errorf("simdiff: device count: %w", err)
	}
	if c.MemoryPerDevice, err = d.DeviceTotalMem(dev); err != nil {
		return c, fmt.Errorf("simdiff: total memory: %w", err)
	}
	if c.DeviceName, err = d.DeviceName(dev); err != nil {
		return c, fmt.Errorf("simdiff: device name: %w", err)
	}
	if c.DriverVersion, err = d.DriverVersion(); err != nil {
		return c, fmt.Errorf("simdiff: driver version: %w", err)
	}
	attr := func(a cuda.DeviceAttribute) (int, error) {
		v, err := d.DeviceAttribute(a, dev)
		if err != nil {
			return 0, fmt.Errorf("simdiff: attribute %d: %w", a, err)
		}
		return v, nil
	}
	var v int
	if c.SMCount, err = attr(cuda.AttrMultiprocessorCount); err != nil {
		return c, err
	}
	for _, x := range []struct {
		a   cuda.DeviceAttribute
		set func(on bool)
	}{
		{cuda.AttrVirtualMemoryManagement, func(on bool) { c.NoVMM = !on }},
		{cuda.AttrHandleTypePosixFDSupported, func(on bool) { c.NoPosixFD = !on }},
		{cuda.AttrHandleTypeFabricSupported, func(on bool) { c.Fabric = on }},
		{cuda.AttrGenericCompressionSupported, func(on bool) { c.Compression = on }},
		{cuda.AttrMulticastSupported, func(on bool) { c.MulticastAllOff = !on }},
	} {
		if v, err = attr(x.a); err != nil {
			return c, err
		}
		x.set(v != 0)
	}
	prop := cuda.DeviceAllocationProp(dev, cuda.HandleNone)
	if c.AllocGranularityMin, err = d.MemGetAllocationGranularity(&prop, cuda.GranularityMinimum); err != nil {
		return c, fmt.Errorf("simdiff: granularity: %w", err)
	}
	if c.AllocGranularityRecommended, err = d.MemGetAllocationGranularity(&prop, cuda.GranularityRecommended); err != nil {
		return c, fmt.Errorf("simdiff: granularity: %w", err)
	}
	if c.Fabric {
		fp := cuda.DeviceAllocationProp(dev, cuda.HandleFabric)
		h, err := d.MemCreate(c.AllocGranularityMin, &fp)
		switch {
		case errors.Is(err, cuda.ErrNotPermitted):
			c.FabricNotPermitted = true
		case err != nil:
			return c, fmt.Errorf("simdiff: trial fabric-exportable allocation: %w", err)
		default:
			if err := d.MemRelease(h); err != nil {
				return c, fmt.Errorf("simdiff: release the trial fabric-exportable allocation: %w", err)
			}
		}
	}
	return c, nil
}

// Images returns the unicast PTX of the broadcast and barrier kernels
// (package ptx: embedded, or from NVLS_PTX_DIR), for Config.Images.
func Images() (map[string][]byte, error) {
	out := map[string][]byte{}
	for _, name := range []string{"broadcast", "barrier"} {
		img, err := ptx.Image(name, ptx.Unicast)
		if err != nil {
			return nil, fmt.Errorf("simdiff: %w", err)
		}
		out[ptx.FileName(name, ptx.Unicast)] = img
	}
	return out, nil
}
