package cuda_test

import (
	"errors"
	"fmt"
	"os"

	"github.com/nvls-go/nvls/cuda"
)

// With NCCL_NVLS_ENABLE=0 in the environment, MulticastCreate refuses
// before it looks at the driver, so this prints the same on a machine with
// GPUs and on one without.
func ExampleLib_MulticastCreate() {
	old, had := os.LookupEnv(cuda.EnvNVLSEnable)
	os.Setenv(cuda.EnvNVLSEnable, "0")
	defer func() {
		if had {
			os.Setenv(cuda.EnvNVLSEnable, old)
		} else {
			os.Unsetenv(cuda.EnvNVLSEnable)
		}
	}()

	lib, _ := cuda.Load() // nil where there is no driver: the call still answers
	prop := cuda.MulticastProp{NumDevices: 8, Size: 1 << 30, HandleTypes: uint64(cuda.HandlePosixFD)}
	_, err := lib.MulticastCreate(&prop)
	fmt.Println(errors.Is(err, cuda.ErrMulticastDisabled))
	// Output: true
}

// A Lib that was not loaded answers every call with ErrNoDriver, so code
// can tell "no GPU here" from a driver failure.
func ExampleLib_notLoaded() {
	var lib *cuda.Lib
	_, err := lib.DeviceCount()
	fmt.Println(errors.Is(err, cuda.ErrNoDriver))
	fmt.Println(err)
	// Output:
	// true
	// cuDeviceGetCount: no CUDA driver: the Lib was not loaded (cuda.Load)
}
