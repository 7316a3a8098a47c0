package kernels

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestDescs: every row is its family's, named once, with the opcode of
// abi.go and nvls.h, and what the kernels take: an operator exactly where
// there are typed entries, a root for broadcast and reduce, a sliced side
// for reduce-scatter (send) and all-gather (recv).
func TestDescs(t *testing.T) {
	ds := Descs()
	require.Len(t, ds, len(Colls))
	names, opcodes := map[string]bool{}, map[uint32]bool{}
	for i, d := range ds {
		assert.Equal(t, Colls[i], d.Coll)
		assert.Same(t, d, d.Coll.Desc())
		assert.False(t, names[d.Name], "%s twice", d.Name)
		assert.False(t, opcodes[d.Opcode], "opcode %d twice", d.Opcode)
		names[d.Name], opcodes[d.Opcode] = true, true
		assert.Equal(t, d.OpName, OpName(d.Opcode))
		assert.Equal(t, d.Moves, d.BusFactor(4) > 0, "%s", d.Name)
	}
	want := map[Coll]struct {
		opcode          uint32
		reduces, rooted bool
		side            Side
	}{
		CollAllReduce: {OpAllReduce, true, false, NoSide}, CollBroadcast: {OpBroadcast, false, true, NoSide},
		CollBarrier: {OpBarrier, false, false, NoSide}, CollReduceScatter: {OpReduceScatter, true, false, SendSide},
		CollAllGather: {OpAllGather, false, false, RecvSide}, CollReduce: {OpReduce, true, true, NoSide},
	}
	for c, w := range want {
		d := c.Desc()
		assert.Equal(t, w.opcode, d.Opcode, "%v", c)
		assert.Equal(t, w.reduces, d.Reduces, "%v", c)
		assert.Equal(t, w.rooted, d.Rooted, "%v", c)
		assert.Equal(t, w.side, d.Sliced, "%v", c)
	}
	assert.Nil(t, Coll(99).Desc())
}

// TestDescInPlace: NCCL's in-place layouts.
func TestDescInPlace(t *testing.T) {
	const base, slice = 0x10000, 256
	ar, rs, ag := CollAllReduce.Desc(), CollReduceScatter.Desc(), CollAllGather.Desc()
	assert.True(t, ar.InPlace(base, base, 2, slice))
	assert.False(t, ar.InPlace(base, base+slice, 1, slice))
	assert.True(t, rs.InPlace(base, base+2*slice, 2, slice), "recv is rank 2's slice of send")
	assert.False(t, rs.InPlace(base, base, 2, slice))
	assert.True(t, ag.InPlace(base+3*slice, base, 3, slice), "send is rank 3's slice of recv")
	assert.False(t, ag.InPlace(base+3*slice, base, 2, slice))
	assert.True(t, rs.InPlace(base, base, 0, slice), "rank 0's slice starts the buffer")
}

// TestDescSupports: the flavors' kernels as the descriptors say.
func TestDescSupports(t *testing.T) {
	ar, ag := CollAllReduce.Desc(), CollAllGather.Desc()
	assert.False(t, ar.Supports(Multicast, F32, Max))
	assert.True(t, ar.Supports(Unicast, F32, Max))
	assert.True(t, ag.Supports(Multicast, F32, Max), "all-gather takes no operator")
	assert.False(t, ag.Supports(Multicast, DType(9), Sum))
}
