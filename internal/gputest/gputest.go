// Package gputest holds what the gpu-tagged tests of several packages
// share: which devices their ranks run on, the machine's GPUs or, on a
// machine with fewer GPUs than a test needs, virtual ranks on GPU 0
// (NVLS_GPU_VRANKS).
package gputest

import (
	"testing"

	"github.com/nvls-go/nvls/cuda"
	"github.com/nvls-go/nvls/internal/env"
)

// EnvVirtualRanks names the variable that asks for virtual ranks: N
// ranks on GPU 0, each with its own workspace, stream and module (a team
// needs team.WithSharedDevices for them, and grids are cut to the SM count
// over the ranks so that every rank's blocks are resident at once: the
// kernels spin on each other). Peer accesses become local ones: this checks
// the algorithms and the flag protocols on hardware, not NVLink.
const EnvVirtualRanks = env.GPUVRanks

// Devices returns the devices of a test's ranks: the first max of the
// machine's GPUs when it has at least min, else GPU 0 repeated
// NVLS_GPU_VRANKS times (at most max) when that is at least min; otherwise
// the test is skipped, saying how to run it. shared reports the virtual
// ranks. A bad NVLS_GPU_VRANKS fails the test.
func Devices(tb testing.TB, d cuda.Driver, min, max int) (devs []cuda.Device, shared bool) {
	tb.Helper()
	count, err := d.DeviceCount()
	if err != nil {
		tb.Fatalf("cuDeviceGetCount: %v", err)
	}
	if count >= min {
		devs = make([]cuda.Device, count)
		if count > max {
			devs = devs[:max]
		}
		for i := range devs {
			if devs[i], err = d.DeviceGet(i); err != nil {
				tb.Fatalf("cuDeviceGet(%d): %v", i, err)
			}
		}
		return devs, false
	}
	v, err := VirtualRanks(max)
	if err != nil {
		tb.Fatal(err)
	}
	if v < min || count < 1 {
		tb.Skipf("%d GPU(s); this test needs %d (or %s=%d to run the ranks on one GPU)", count, min, EnvVirtualRanks, min)
	}
	dev, err := d.DeviceGet(0)
	if err != nil {
		tb.Fatalf("cuDeviceGet(0): %v", err)
	}
	devs = make([]cuda.Device, v)
	for i := range devs {
		devs[i] = dev
	}
	tb.Logf("%d GPU(s): %d virtual ranks on GPU 0 (%s)", count, v, EnvVirtualRanks)
	return devs, true
}

// VirtualRanks is NVLS_GPU_VRANKS: 0 when unset or blank, an error unless
// it is an integer from 2 to max.
func VirtualRanks(max int) (int, error) {
	n, _, err := env.OS.Int(EnvVirtualRanks, 2, max)
	return n, err
}

// FillPTX is a hand-written kernel, FillEntry: out[i] = val ^ i for i < n,
// taking one 16-byte FillParams. Tests launch it as a kernel of their own:
// the binding's, and a producer a collective reads after (PDL).
const FillPTX = `.version 8.0
.target sm_90
.address_size 64

.visible .entry nvls_test_fill(
	.param .align 8 .b8 nvls_test_fill_param_0[16]
)
{
	.reg .pred 	%p<2>;
	.reg .b32 	%r<8>;
	.reg .b64 	%rd<5>;

	ld.param.u64 	%rd1, [nvls_test_fill_param_0];
	ld.param.u32 	%r1, [nvls_test_fill_param_0+8];
	ld.param.u32 	%r2, [nvls_test_fill_param_0+12];
	mov.u32 	%r3, %ctaid.x;
	mov.u32 	%r4, %ntid.x;
	mov.u32 	%r5, %tid.x;
	mad.lo.s32 	%r6, %r3, %r4, %r5;
	setp.ge.u32 	%p1, %r6, %r1;
	@%p1 bra 	$L__done;
	cvta.to.global.u64 	%rd2, %rd1;
	mul.wide.u32 	%rd3, %r6, 4;
	add.s64 	%rd4, %rd2, %rd3;
	xor.b32 	%r7, %r2, %r6;
	st.global.u32 	[%rd4], %r7;
$L__done:
	ret;
}
`

// FillEntry is FillPTX's entry point.
const FillEntry = "nvls_test_fill"

// FillParams is FillPTX's parameter.
type FillParams struct {
	Out cuda.DevicePtr
	N   uint32
	Val uint32
}
