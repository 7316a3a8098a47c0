package kabi

import (
	"bufio"
	"os"
	"reflect"
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/nvls-go/nvls/kernels"
)

// parseDefines returns every `#define NVLS_<NAME> <decimal>` of nvls.h.
func parseDefines(t *testing.T) map[string]uint64 {
	t.Helper()
	f, err := os.Open("../../kernels/nvls.h")
	require.NoError(t, err)
	defer f.Close()
	re := regexp.MustCompile(`^#define\s+(NVLS_[A-Z0-9_]+)\s+([0-9]+)\s*$`)
	defs := map[string]uint64{}
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		if m := re.FindStringSubmatch(sc.Text()); m != nil {
			v, err := strconv.ParseUint(m[2], 10, 64)
			require.NoError(t, err)
			defs[m[1]] = v
		}
	}
	require.NoError(t, sc.Err())
	return defs
}

func TestABIConstantsMatchHeader(t *testing.T) {
	defs := parseDefines(t)
	want := map[string]uint64{
		"NVLS_MAX_RANKS":              MaxRanks,
		"NVLS_MAX_BLOCKS":             MaxBlocks,
		"NVLS_STATUS_OFFSET":          StatusOffset,
		"NVLS_COUNTER_OFFSET":         CounterOffset,
		"NVLS_EPOCH_OFFSET":           EpochOffset,
		"NVLS_PHASES":                 Phases,
		"NVLS_SIGNAL_BYTES":           SignalBytes,
		"NVLS_STATUS_TIMEOUT":         StatusTimeout,
		"NVLS_STATUS_ABORTED":         StatusAborted,
		"NVLS_STATUS_MISMATCH":        StatusMismatch,
		"NVLS_ARRIVE_OFFSET":          ArriveOffset,
		"NVLS_HOST_DIAG_OFFSET":       HostDiagOffset,
		"NVLS_PHASE_ENTRY":            PhaseEntry,
		"NVLS_FAILED_OFFSET":          FailedOffset,
		"NVLS_OP_BARRIER":             kernels.OpBarrier,
		"NVLS_OP_ALLREDUCE":           kernels.OpAllReduce,
		"NVLS_OP_BROADCAST":           kernels.OpBroadcast,
		"NVLS_BLOCK_THREADS":          BlockThreads,
		"NVLS_VEC_BYTES":              VecBytes,
		"NVLS_PARAMS_SIZE":            ParamsSize,
		"NVLS_LL_OFFSET":              LLOffset,
		"NVLS_ROOT_SEND_OFFSET":       RootSendOffset,
		"NVLS_LL_LINE_BYTES":          LLLineBytes,
		"NVLS_FLAG_ABS_PTRS":          FlagAbsPtrs,
		"NVLS_FLAG_ABS_SEND":          FlagAbsSend,
		"NVLS_FLAG_ABS_RECV":          FlagAbsRecv,
		"NVLS_FLAG_SLICED":            FlagSliced,
		"NVLS_FLAG_LAUNCH_DEPENDENTS": FlagLaunchDependents,
		"NVLS_FLAG_PUSH":              FlagPush,
		"NVLS_PUSH_FLAG_OFFSET":       PushFlagOffset,
		"NVLS_PHASE_PUSH":             PhasePush,
		"NVLS_PUSH_VECS":              PushVecs,
		"NVLS_RING_CHUNKS":            RingChunks,
		"NVLS_RING_VECS":              RingVecs,
		"NVLS_PUSH_DEPTH":             PushDepth,
		"NVLS_PUSH_FLAGS_BYTES":       PushFlagsBytes,
		"NVLS_FLAG_ROOT_SLICE":        FlagRootSlice,
		"NVLS_FLAG_ONE_PASS":          FlagOnePass,
		"NVLS_FLAG_LOCAL":             FlagLocal,
		"NVLS_FLAG_PIECES":            FlagPieces,
		"NVLS_FLAG_LL_TWO":            FlagLLTwo,
		"NVLS_FLAG_LL":                FlagLL,
		"NVLS_CE_PIECES":              CEPieces,
		"NVLS_CE_FLAG_OFFSET":         CEFlagOffset,
		"NVLS_OP_REDUCESCATTER":       kernels.OpReduceScatter,
		"NVLS_OP_ALLGATHER":           kernels.OpAllGather,
		"NVLS_OP_REDUCE":              kernels.OpReduce,
	}
	for name, v := range want {
		got, ok := defs[name]
		if assert.True(t, ok, "nvls.h lacks #define %s", name) {
			assert.Equal(t, v, got, "%s: nvls.h and Go disagree", name)
		}
	}
	for name := range defs {
		_, ok := want[name]
		assert.True(t, ok, "nvls.h defines %s, which has no Go twin checked here", name)
	}
}

func TestSignalAreaLayout(t *testing.T) {
	// The counters and epochs of every phase and block fit in the signal
	// area without overlapping each other or the status word.
	assert.GreaterOrEqual(t, FailedOffset, StatusOffset+8)
	assert.GreaterOrEqual(t, CounterOffset, FailedOffset+8)
	assert.Zero(t, FailedOffset%8)
	assert.LessOrEqual(t, CounterOffset+Phases*MaxBlocks*4, EpochOffset)
	assert.LessOrEqual(t, EpochOffset+Phases*MaxBlocks*4, LLOffset)
	assert.LessOrEqual(t, LLOffset+8, RootSendOffset)
	assert.LessOrEqual(t, RootSendOffset+MaxBlocks*8, PushFlagOffset)
	assert.LessOrEqual(t, PushFlagOffset+MaxBlocks*4, CEFlagOffset)
	assert.LessOrEqual(t, CEFlagOffset+CEPieces*MaxRanks*4, ArriveOffset)
	assert.LessOrEqual(t, ArriveOffset+2*MaxBlocks*MaxRanks*8, SignalBytes)
	assert.Zero(t, LLOffset%8)
	assert.Zero(t, SignalBytes%VecBytes)
}

type cField struct {
	name      string
	size, len int
	off       int
}

// parseStruct reads struct nvls_params from nvls.h and lays it out with the
// C rules (each field aligned to its size; u32/u64 only).
func parseStruct(t *testing.T) ([]cField, int) {
	t.Helper()
	src, err := os.ReadFile("../../kernels/nvls.h")
	require.NoError(t, err)
	s := string(src)
	i := strings.Index(s, "struct nvls_params {")
	require.GreaterOrEqual(t, i, 0, "nvls.h has no struct nvls_params")
	body := s[i+len("struct nvls_params {"):]
	j := strings.Index(body, "};")
	require.GreaterOrEqual(t, j, 0)
	body = body[:j]
	defs := parseDefines(t)
	re := regexp.MustCompile(`^\s*(u32|u64)\s+([a-z_0-9]+)(?:\[([A-Z_0-9]+)\])?;`)
	var fields []cField
	off, maxAlign := 0, 1
	for _, line := range strings.Split(body, "\n") {
		if strings.TrimSpace(line) == "" {
			continue
		}
		m := re.FindStringSubmatch(line)
		require.NotNil(t, m, "cannot parse struct nvls_params line %q", line)
		size := 4
		if m[1] == "u64" {
			size = 8
		}
		n := 1
		if m[3] != "" {
			v, ok := defs[m[3]]
			if !ok {
				v2, err := strconv.Atoi(m[3])
				require.NoError(t, err, "array length %s", m[3])
				v = uint64(v2)
			}
			n = int(v)
		}
		off = (off + size - 1) / size * size
		fields = append(fields, cField{name: m[2], size: size, len: n, off: off})
		off += size * n
		maxAlign = max(maxAlign, size)
	}
	off = (off + maxAlign - 1) / maxAlign * maxAlign
	return fields, off
}

func TestParamsMatchHeader(t *testing.T) {
	fields, size := parseStruct(t)
	typ := reflect.TypeOf(Params{})
	require.Equal(t, typ.NumField(), len(fields), "field count of Params and struct nvls_params")
	assert.Equal(t, ParamsSize, size, "C size of struct nvls_params")
	assert.Equal(t, uintptr(ParamsSize), typ.Size(), "unsafe.Sizeof(Params{})")
	assert.Zero(t, ParamsSize%8)
	for i, c := range fields {
		g := typ.Field(i)
		if g.Name == "_" {
			assert.True(t, strings.HasPrefix(c.name, "pad"), "Go blank field %d is C %s, want a pad field", i, c.name)
		} else {
			assert.Equal(t, strings.ReplaceAll(c.name, "_", ""), strings.ToLower(g.Name), "field %d", i)
		}
		assert.Equal(t, uintptr(c.off), g.Offset, "offset of %s", c.name)
		assert.Equal(t, uintptr(c.size*c.len), g.Type.Size(), "size of %s", c.name)
		if c.len > 1 {
			assert.Equal(t, reflect.Array, g.Type.Kind(), "%s", c.name)
			assert.Equal(t, c.len, g.Type.Len(), "%s", c.name)
		}
	}
}

func TestParamsMarshalRoundTrip(t *testing.T) {
	p := Params{MC: 0x1122334455667788, Send: 65536, Recv: 131072, Stage: 1 << 20, LLArea: 3 << 20, Count: 12345,
		TimeoutNs: 5e9, ElemBytes: 2, LLLines: 777, Rank: 3, NRanks: 8, Root: 5, Opcode: kernels.OpBroadcast, Flags: FlagAbsPtrs,
		HostStatus: 0x7f12345678c0}
	for i := range p.UC {
		p.UC[i] = uint64(0x7f0000000000 + i<<32)
	}
	b := p.Marshal()
	require.Len(t, b, ParamsSize)
	// The bytes are the in-memory layout of the struct (the driver copies
	// exactly these).
	raw := (*[ParamsSize]byte)(unsafePointer(&p))
	assert.Equal(t, raw[:], b)
	q, err := UnmarshalParams(b)
	require.NoError(t, err)
	assert.Equal(t, p, q)
	_, err = UnmarshalParams(b[:ParamsSize-1])
	assert.Error(t, err)
}

func TestStatusWord(t *testing.T) {
	w := TimeoutStatus(kernels.OpAllReduce, 1, 200)
	s := Status{Word: w}
	assert.True(t, s.TimedOut())
	assert.Equal(t, uint32(kernels.OpAllReduce), s.Opcode())
	assert.Equal(t, uint32(1), s.Phase())
	assert.Equal(t, uint32(200), s.Block())
	assert.Equal(t, "all-reduce timed out in barrier phase 1 (block 200)", s.String())
	assert.Equal(t, "ok", Status{}.String())

	f := FailedWord(w, 6)
	a := Status{Word: AbortStatus(kernels.OpBarrier, PhaseEntry, 0, f)}
	assert.False(t, a.TimedOut())
	assert.True(t, a.Aborted())
	assert.Equal(t, 6, a.FailedRank())
	assert.Equal(t, uint32(kernels.OpBarrier), a.Opcode())
	assert.Equal(t, "barrier gave up at entry (block 0): rank 6 had failed", a.String())
	a = Status{Word: AbortStatus(kernels.OpAllReduce, 1, 77, f)}
	assert.Equal(t, "all-reduce gave up in barrier phase 1 (block 77): rank 6 had failed", a.String())
	assert.False(t, Status{Word: f}.Aborted(), "a team-failed word keeps the failure's kind")
	assert.True(t, Status{Word: f}.TimedOut())
}

// TestReadmeParamsTable: the field table of kernels/README.md gives every
// field of struct nvls_params its offset.
func TestReadmeParamsTable(t *testing.T) {
	fields, _ := parseStruct(t)
	src, err := os.ReadFile("../../kernels/README.md")
	require.NoError(t, err)
	re := regexp.MustCompile("(?m)^\\| ([0-9]+) \\| `u(?:32|64) ([a-z_0-9]+)")
	doc := map[string]int{}
	for _, m := range re.FindAllStringSubmatch(string(src), -1) {
		off, err := strconv.Atoi(m[1])
		require.NoError(t, err)
		doc[m[2]] = off
	}
	require.NotEmpty(t, doc, "README.md has no parameter table")
	for _, f := range fields {
		if off, ok := doc[f.name]; ok {
			assert.Equal(t, f.off, off, "README.md: offset of %s", f.name)
		}
	}
	for name := range doc {
		found := false
		for _, f := range fields {
			found = found || f.name == name
		}
		assert.True(t, found, "README.md documents %s, which struct nvls_params lacks", name)
	}
	assert.Len(t, doc, len(fields), "README.md documents every field")
}

// TestCEPieceStart: the pieces cover the count in order, in whole vectors
// but the last, each at most half of what is left before it, the last two
// equal where the count is a multiple of 128 vectors; small counts give
// empty pieces, not overlapping ones.
func TestCEPieceStart(t *testing.T) {
	for _, per := range []uint64{4, 8} {
		for _, count := range []uint64{0, 1, 7, 64, 1000, 128 * 4096, 1<<27 + 3} {
			prev := uint64(0)
			for i := 0; i <= CEPieces; i++ {
				s := CEPieceStart(i, count, per)
				assert.GreaterOrEqual(t, s, prev, "count %d, piece %d", count, i)
				if i < CEPieces {
					assert.Zero(t, s%per, "count %d, piece %d: whole vectors", count, i)
				}
				prev = s
			}
			assert.Equal(t, count, CEPieceStart(CEPieces, count, per))
		}
	}
	n := uint64(128 * 4096 * 4)
	assert.Equal(t, n/2, CEPieceStart(1, n, 4))
	assert.Equal(t, n-n/128, CEPieceStart(CEPieces-1, n, 4))
	assert.Equal(t, n/128, CEPieceStart(CEPieces-1, n, 4)-CEPieceStart(CEPieces-2, n, 4), "the last two pieces equal")
}
