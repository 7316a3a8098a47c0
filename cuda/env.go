package cuda

import "github.com/nvls-go/nvls/internal/env"

// EnvNVLSEnable is the ecosystem's multicast switch (NCCL's name for it).
const EnvNVLSEnable = env.NVLSEnable

// MulticastDisabledByEnv reports whether NCCL_NVLS_ENABLE turns multicast
// off: 0 does (in any spelling NCCL reads as 0: 00, 0x0, -0), and so does
// a value that is not an integer as NCCL reads it, for which err (a
// *team.EnvError, naming the variable and what it accepts) says why: a
// value of the safety switch that is not understood never means "on".
// Unset, blank or any other integer (NCCL: 1 on, 2 auto) is not off.
func MulticastDisabledByEnv() (off bool, err error) {
	off, _, err = env.OS.NVLSEnable()
	return off, err
}
