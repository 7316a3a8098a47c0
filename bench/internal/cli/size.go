package cli

import (
	"errors"
	"fmt"
	"math"
	"strconv"
	"strings"
)

// sizeUnits are the suffixes ParseSize accepts, longest first.
var sizeUnits = []struct {
	suffix string
	mult   uint64
}{
	{"KIB", 1 << 10}, {"MIB", 1 << 20}, {"GIB", 1 << 30}, {"TIB", 1 << 40},
	{"KB", 1 << 10}, {"MB", 1 << 20}, {"GB", 1 << 30}, {"TB", 1 << 40},
	{"K", 1 << 10}, {"M", 1 << 20}, {"G", 1 << 30}, {"T", 1 << 40}, {"B", 1},
}

// ParseSize reads a byte count as nccl-tests does (a number with an
// optional K, M, G or T suffix, powers of 1024), also accepting KiB, KB
// and B.
func ParseSize(s string) (uint64, error) {
	u := strings.ToUpper(strings.TrimSpace(s))
	mult := uint64(1)
	for _, unit := range sizeUnits {
		if strings.HasSuffix(u, unit.suffix) {
			mult = unit.mult
			u = strings.TrimSpace(strings.TrimSuffix(u, unit.suffix))
			break
		}
	}
	n, err := strconv.ParseUint(u, 10, 64)
	if err != nil || u == "" {
		return 0, errors.New("not a size (want a byte count like 8, 64K, 128M, 4G)")
	}
	if n > math.MaxUint64/mult {
		return 0, errors.New("too large")
	}
	return n * mult, nil
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
