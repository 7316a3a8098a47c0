package multicast

import (
	"errors"
	"fmt"
	"strings"

	"github.com/nvls-go/nvls/cuda"
)

// Diagnosis says what a driver error met while setting up a multicast
// object most likely means when it is one of the codes by which the
// driver reports that the NVSwitch fabric cannot serve multicast now.
type Diagnosis struct {
	// Op is the driver entry point that failed, e.g. "cuMulticastBindMem".
	Op string
	// Code is its result, e.g. cuda.ErrorSystemNotReady.
	Code cuda.Result
	// Likely says what is most likely wrong.
	Likely string
	// Check says what to look at, and what usually clears it.
	Check string
}

// Cause is the failed call and its result, e.g.
// "cuMulticastBindMem: CUDA_ERROR_SYSTEM_NOT_READY (802)".
func (d Diagnosis) Cause() string {
	return fmt.Sprintf("%s: %s (%d)", d.Op, d.Code, int32(d.Code))
}

// The texts of the diagnoses. They name the tools an administrator uses:
// the Fabric Manager service (nvidia-fabricmanager), nvidia-smi's fabric
// section (a healthy GPU reports "State: Completed" and "Status:
// Success"), the IMEX channels fabric handles need.
const (
	checkFabricState = "`nvidia-smi -q | grep -i -A 3 fabric` should say State: Completed and Status: Success on every GPU"

	likelyNotReady = "the NVSwitch fabric is not ready: the Fabric Manager (nvidia-fabricmanager) is not running, or has not (yet) registered this GPU with the fabric; " +
		"a Fabric Manager that stalls while it forms the multicast team gives this error too, and then a retry may pass"
	checkNotReady = "`systemctl status nvidia-fabricmanager` (it must run, at the driver's version); " + checkFabricState

	likelyIllegalState = "the Fabric Manager or the NVSwitches are not in a state that allows multicast: the Fabric Manager was stopped or restarted after the driver loaded, " +
		"the GPU's fabric registration failed, or an earlier error left the NVSwitch fabric degraded"
	checkIllegalState = checkFabricState + "; `journalctl -u nvidia-fabricmanager` for its errors; restarting nvidia-fabricmanager, or resetting the idle GPUs (`nvidia-smi -r`), usually clears it"

	likelyNotSupported = "the node does not offer multicast to this process although the device reports MULTICAST_SUPPORTED: " +
		"the NVSwitches are not managed by a Fabric Manager with NVLink SHARP (or its version differs from the driver's), " +
		"or the GPUs are in a virtual machine or an NVSwitch partition without multicast"
	likelyNoIMEX      = "; fabric handles also need an IMEX channel (the nvidia-imex service, /dev/nvidia-caps-imex-channels)"
	checkNotSupported = checkFabricState + "; `nvidia-smi` and the Fabric Manager's log must show the same driver version"

	likelyOutOfSlots = "the NVSwitch multicast resources are exhausted: the fabric has a fixed number of multicast objects (128 on HGX H100/H200), " +
		"shared by every process on the node (NCCL communicators with NVLS hold some, and so does every open team), or the memory for the object ran out"
	checkOutOfSlots = "look for other processes on these GPUs (`nvidia-smi`); close teams and communicators no longer used; NCCL_NVLS_ENABLE=0 in other jobs leaves their slots free"

	likelyCliques = "the devices are not all in one NVLink clique (the set of GPUs one NVLink/NVSwitch partition connects): a multicast object spans one clique, " +
		"though every device reports MULTICAST_SUPPORTED"
	checkCliques = "`nvidia-smi -q | grep -i -A 6 fabric` gives each GPU's ClusterUUID and CliqueId: use GPUs that share both (CUDA_VISIBLE_DEVICES), or one team per clique"
)

// Diagnose returns the diagnosis of err when it holds a driver error (a
// *cuda.Error) that means the fabric cannot serve multicast now:
//
//   - CUDA_ERROR_SYSTEM_NOT_READY (802) or CUDA_ERROR_ILLEGAL_STATE (401),
//     from any call of the multicast part of a setup;
//   - CUDA_ERROR_NOT_SUPPORTED (801) from a cuMulticast* entry point;
//   - CUDA_ERROR_OUT_OF_MEMORY from a cuMulticast* entry point (multicast
//     slots exhausted);
//   - CUDA_ERROR_INVALID_DEVICE from cuMulticastAddDevice or from the
//     cuMemMap of the object (devices of different NVLink cliques).
//
// handles is the object's handle types: with cuda.HandleFabric the
// diagnosis of NOT_SUPPORTED also names IMEX. For any other error ok is
// false. Callers pass only errors of the multicast part of a setup: the
// same codes from unrelated calls mean other things.
func Diagnose(err error, handles cuda.HandleType) (d Diagnosis, ok bool) {
	var ce *cuda.Error
	if !errors.As(err, &ce) {
		return d, false
	}
	d.Op, d.Code = ce.Op, ce.Code
	mcEntry := strings.HasPrefix(ce.Op, "cuMulticast")
	switch {
	case ce.Code == cuda.ErrorSystemNotReady:
		d.Likely, d.Check = likelyNotReady, checkNotReady
	case ce.Code == cuda.ErrorIllegalState:
		d.Likely, d.Check = likelyIllegalState, checkIllegalState
	case ce.Code == cuda.ErrorNotSupported && mcEntry:
		d.Likely, d.Check = likelyNotSupported, checkNotSupported
		if handles&cuda.HandleFabric != 0 {
			d.Likely += likelyNoIMEX
		}
	case ce.Code == cuda.ErrorOutOfMemory && mcEntry:
		d.Likely, d.Check = likelyOutOfSlots, checkOutOfSlots
	case ce.Code == cuda.ErrorInvalidDevice && (ce.Op == "cuMulticastAddDevice" || ce.Op == "cuMemMap"):
		d.Likely, d.Check = likelyCliques, checkCliques
	default:
		return Diagnosis{}, false
	}
	return d, true
}
