package unicastonly

import (
	"errors"
	"fmt"

	"github.com/nvls-go/nvls/cuda"
)

// ErrMulticastForbidden is what every multicast entry point returns.
var ErrMulticastForbidden = errors.New("unicastonly: multicast entry point called (forbidden here)")

// Driver is a cuda.Driver whose multicast entry points refuse. OnRefuse,
// when set, is told each refused call's name.
type Driver struct {
	cuda.Driver
	OnRefuse func(op string)
}

func (d Driver) refuse(op string) error {
	if d.OnRefuse != nil {
		d.OnRefuse(op)
	}
	return fmt.Errorf("%s: %w", op, ErrMulticastForbidden)
}

// MulticastGetGranularity refuses.
func (d Driver) MulticastGetGranularity(*cuda.MulticastProp, cuda.GranularityFlags) (uint64, error) {
	return 0, d.refuse("cuMulticastGetGranularity")
}

// MulticastCreate refuses.
func (d Driver) MulticastCreate(*cuda.MulticastProp) (cuda.MemHandle, error) {
	return 0, d.refuse("cuMulticastCreate")
}

// MulticastAddDevice refuses.
func (d Driver) MulticastAddDevice(cuda.MemHandle, cuda.Device) error {
	return d.refuse("cuMulticastAddDevice")
}

// MulticastBindMem refuses.
func (d Driver) MulticastBindMem(cuda.MemHandle, uint64, cuda.MemHandle, uint64, uint64) error {
	return d.refuse("cuMulticastBindMem")
}

// MulticastBindAddr refuses.
func (d Driver) MulticastBindAddr(cuda.MemHandle, uint64, cuda.DevicePtr, uint64) error {
	return d.refuse("cuMulticastBindAddr")
}

// MulticastUnbind refuses.
func (d Driver) MulticastUnbind(cuda.MemHandle, cuda.Device, uint64, uint64) error {
	return d.refuse("cuMulticastUnbind")
}
