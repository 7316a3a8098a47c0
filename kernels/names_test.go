package kernels

import (
	"errors"
	"fmt"
	"os"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

func TestAllReduceName(t *testing.T) {
	assert.Equal(t, "nvls_allreduce_oneshot_f32_sum", AllReduceName(F32, Sum, OneShot))
	assert.Equal(t, "nvls_allreduce_twoshot_bf16_max", AllReduceName(BF16, Max, TwoShot))
	assert.Equal(t, "nvls_allreduce_oneshot_u64_min", AllReduceName(U64, Min, OneShot))
	assert.Equal(t, "", AllReduceName(DType(99), Sum, OneShot))
	assert.Equal(t, "", AllReduceName(F32, RedOp(9), OneShot))
	assert.Equal(t, "", AllReduceName(F32, Sum, Algo(7)))
	allocs := testing.AllocsPerRun(100, func() { _ = AllReduceName(S32, Max, TwoShot) })
	assert.Zero(t, allocs)
}

func TestSupportedTable(t *testing.T) {
	for _, dt := range DTypes {
		for _, op := range RedOps {
			assert.True(t, Supported(Unicast, dt, op), "unicast %v %v", dt, op)
		}
	}
	n := 0
	for _, dt := range DTypes {
		for _, op := range RedOps {
			if Supported(Multicast, dt, op) {
				n++
			}
		}
	}
	assert.Equal(t, 16, n)
	assert.False(t, Supported(Multicast, F32, Min))
	assert.False(t, Supported(Multicast, F32, Max))
	assert.True(t, Supported(Multicast, F32, Sum))
	assert.True(t, Supported(Multicast, BF16, Min))
	assert.False(t, Supported(Flavor(7), F32, Sum))
	assert.False(t, Supported(Unicast, DType(6), Sum))
}

func TestCheckSupported(t *testing.T) {
	require.NoError(t, CheckSupported(Multicast, F16, Max))
	err := CheckSupported(Multicast, F32, Max)
	require.Error(t, err)
	assert.True(t, errors.Is(err, ErrUnsupported))
	var ue *UnsupportedError
	require.True(t, errors.As(err, &ue))
	assert.Equal(t, []RedOp{Sum}, ue.Allowed)
	assert.Equal(t, "kernels: f32 max is not supported by the multicast flavor (allowed for f32: sum)", err.Error())
	wrapped := fmt.Errorf("collectives: %w", CheckSupported(Unicast, DType(42), Sum))
	assert.True(t, errors.Is(wrapped, ErrUnsupported))
	assert.Contains(t, wrapped.Error(), "invalid element type")
}

func TestParse(t *testing.T) {
	for _, dt := range DTypes {
		got, err := ParseDType(dt.String())
		require.NoError(t, err)
		assert.Equal(t, dt, got)
	}
	for _, op := range RedOps {
		got, err := ParseRedOp(op.String())
		require.NoError(t, err)
		assert.Equal(t, op, got)
	}
	_, err := ParseDType("f64")
	assert.Error(t, err)
	_, err = ParseRedOp("prod")
	assert.Error(t, err)
	assert.Equal(t, 2, BF16.Size())
	assert.Equal(t, 8, U64.Size())
}

// TestEntriesMatchSources checks the name table against the sources:
// every entry the Go side expects is produced by the .cu for that flavor,
// and nothing else. The typed sources instantiate NVLS_TYPE_OPS (nvls.h:
// the pairs of both flavors, then NVLS_TYPE_OPS_UNICAST_ONLY's) with a
// macro whose entries are nvls_<source>_<algo>_<t>_<op>; the untyped ones
// declare their entries as extern "C" __global__ functions.
func TestEntriesMatchSources(t *testing.T) {
	hdr, err := os.ReadFile("nvls.h")
	require.NoError(t, err)
	pair := regexp.MustCompile(`X\((\w+), \w+, (\w+), \w+\)`)
	block := func(re string) []string {
		m := regexp.MustCompile(re).FindSubmatch(hdr)
		require.NotNil(t, m, re)
		var ps []string
		for _, p := range pair.FindAllStringSubmatch(string(m[1]), -1) {
			ps = append(ps, p[1]+"_"+p[2])
		}
		return ps
	}
	both := block(`(?s)#define NVLS_TYPE_OPS\(X\)(.*?)NVLS_TYPE_OPS_UNICAST_ONLY\(X\)\n`)
	ucOnly := block(`(?s)#else\n#define NVLS_TYPE_OPS_UNICAST_ONLY\(X\)(.*?)#endif`)
	require.Len(t, both, 16)
	require.Len(t, ucOnly, 2)
	entry := regexp.MustCompile(`(?m)^\s*(?:extern "C" __global__ void __launch_bounds__\(NVLS_BLOCK_THREADS\)\s*)?(nvls_\w+)\((?:const )?struct nvls_params`)
	for _, c := range Colls {
		info := collTable[c]
		src, err := os.ReadFile(info.Name + ".cu")
		require.NoError(t, err)
		for _, f := range []Flavor{Unicast, Multicast} {
			want := map[string]bool{}
			if info.Reduces {
				require.Contains(t, string(src), "NVLS_TYPE_OPS(", info.Name)
				pairs := both
				if f == Unicast {
					pairs = append(append([]string(nil), both...), ucOnly...)
				}
				for _, p := range pairs {
					for _, a := range info.Algos {
						want["nvls_"+info.Name+"_"+a.String()+"_"+p] = true
					}
				}
			} else {
				for _, m := range entry.FindAllStringSubmatch(string(src), -1) {
					want[m[1]] = true
				}
			}
			got := map[string]bool{}
			for _, n := range Entries(info.Name, f) {
				got[n] = true
			}
			assert.Equal(t, want, got, "%s, flavor %v", info.Name, f)
		}
	}
	// all-reduce 3 x 18 (16), broadcast, barrier, reduce-scatter 2 x 18
	// (16), all-gather 2, reduce 3 x 18 (16).
	assert.Len(t, AllEntries(Unicast), 54+2+36+2+54)
	assert.Len(t, AllEntries(Multicast), 48+2+32+2+48)
}

// TestParseSpellings: the one parser takes every spelling any of the
// former four took (kernels, collectives, nvls-bench's -d and -o), in any
// case, and its errors match ErrInvalid.
func TestParseSpellings(t *testing.T) {
	for want, names := range map[DType][]string{
		F32:  {"f32", "float32", "float", "fp32"},
		F16:  {"f16", "float16", "half", "fp16"},
		BF16: {"bf16", "bfloat16"},
		S32:  {"s32", "int32", "int", "i32"},
		U32:  {"u32", "uint32"},
		U64:  {"u64", "uint64"},
	} {
		for _, n := range names {
			for _, s := range []string{n, strings.ToUpper(n), " " + n + " "} {
				got, err := ParseDType(s)
				require.NoError(t, err, s)
				assert.Equal(t, want, got, s)
			}
		}
	}
	assert.Len(t, DTypeSpellings(), 18)
	assert.Equal(t, []string{"float", "half", "bfloat16", "int32", "uint32", "uint64"}, DTypeSpellings()[:6], "nccl-tests' names first")
	for _, s := range DTypeSpellings() {
		_, err := ParseDType(s)
		assert.NoError(t, err, s)
	}
	for want, names := range map[RedOp][]string{Sum: {"sum", "add", "SUM"}, Min: {"min", "Min"}, Max: {"max"}} {
		for _, n := range names {
			got, err := ParseRedOp(n)
			require.NoError(t, err, n)
			assert.Equal(t, want, got, n)
		}
	}
	_, err := ParseDType("f64")
	assert.ErrorIs(t, err, ErrInvalid)
	assert.ErrorContains(t, err, `unknown element type "f64" (want f32|float|float32|fp32, f16|half|float16|fp16, bf16|bfloat16, s32|int32|int|i32, u32|uint32, u64|uint64)`)
	_, err = ParseRedOp("prod")
	assert.ErrorIs(t, err, ErrInvalid)
	_, err = DType(9).MarshalText()
	assert.ErrorIs(t, err, ErrInvalid)
	for _, dt := range DTypes {
		assert.NotEmpty(t, dt.NCCLName())
	}
}
