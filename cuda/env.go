package cuda

import (
	"os"
	"strings"
)

// EnvNVLSEnable is the ecosystem's multicast switch (NCCL's name for it).
const EnvNVLSEnable = "NCCL_NVLS_ENABLE"

// MulticastDisabledByEnv reports whether NCCL_NVLS_ENABLE=0 (or "false",
// "off", "no") is set in the environment: then no multicast object may be
// created, whatever else asks for one.
func MulticastDisabledByEnv() bool {
	v, ok := os.LookupEnv(EnvNVLSEnable)
	if !ok {
		return false
	}
	switch strings.ToLower(strings.TrimSpace(v)) {
	case "0", "false", "off", "no", "n":
		return true
	}
	return false
}
