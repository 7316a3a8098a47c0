//go:build cgo

package main

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/nvls-go/nvls/collectives"
	"github.com/nvls-go/nvls/nccl"
)

// TestPlanFor: what runs here and the one-line why of what is forwarded;
// every PreMulSum operator (each a number of its own) shares one why, so
// the counts at destroy stay a short list.
func TestPlanFor(t *testing.T) {
	p, why := planFor(&call{kind: kAllReduce, count: 10, dt: nccl.Bfloat16, op: nccl.Max})
	assert.Empty(t, why)
	assert.Equal(t, collectives.BF16, p.dt)
	assert.Equal(t, collectives.Max, p.op)

	_, why = planFor(&call{kind: kReduce, count: 10, dt: nccl.Float32, op: nccl.Avg})
	assert.Equal(t, "operator ncclAvg has no nvls kernel", why)
	_, w1 := planFor(&call{kind: kAllReduce, count: 10, dt: nccl.Float32, op: nccl.RedOp(1421532680)})
	_, w2 := planFor(&call{kind: kReduceScatter, count: 10, dt: nccl.Float32, op: nccl.RedOp(770695107)})
	assert.Equal(t, "an operator of ncclRedOpCreatePreMulSum has no nvls kernel", w1)
	assert.Equal(t, w1, w2)

	_, why = planFor(&call{kind: kAllReduce, count: 10, dt: nccl.Int8, op: nccl.Sum})
	assert.Equal(t, "ncclInt8 ncclSum has no nvls kernel", why)
	p, why = planFor(&call{kind: kBroadcast, count: 10, dt: nccl.Int8})
	assert.Empty(t, why)
	assert.Equal(t, uint64(5), p.count, "bytes as 16-bit words")
}
