package cli

import (
	"errors"
	"fmt"

	"github.com/nvls-go/nvls/internal/env"
)

// ParseSize reads a byte count as nccl-tests does (a number with an
// optional K, M, G or T suffix, powers of 1024), also accepting KiB, KB
// and B: the one size parser of nvls (env.ParseSize, which the NVLS_*
// sizes use too), with the flags' wording.
func ParseSize(s string) (uint64, error) {
	n, err := env.ParseSize(s)
	if err == nil {
		return n, nil
	}
	if errors.Is(err, env.ErrTooLarge) {
		return 0, errors.New("too large")
	}
	return 0, errors.New("not a size (want a byte count like 8, 64K, 128M, 4G)")
}

// FormatSize is a short form of a byte count: 8 B, 64 KiB, 4 GiB (a
// binary unit only where the count is a whole number of it).
func FormatSize(n uint64) string {
	switch {
	case n >= 1<<30 && n%(1<<30) == 0:
		return fmt.Sprintf("%d GiB", n>>30)
	case n >= 1<<20 && n%(1<<20) == 0:
		return fmt.Sprintf("%d MiB", n>>20)
	case n >= 1<<10 && n%(1<<10) == 0:
		return fmt.Sprintf("%d KiB", n>>10)
	}
	return fmt.Sprintf("%d B", n)
}
