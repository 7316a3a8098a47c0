package main

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/nvls-go/nvls/kernels"
)

// TestCollsFollowDescs keeps docs/architecture.md's add-a-collective
// recipe honest for nvls-bench: its table has one row per descriptor, in
// kernels.Descs' order, each reading that descriptor, and every
// collective that moves data has its runners, check and traffic model.
func TestCollsFollowDescs(t *testing.T) {
	ds := kernels.Descs()
	require.Len(t, colls, len(ds), "one bench entry per descriptor")
	for i, d := range ds {
		c := colls[i]
		assert.Same(t, d, c.Desc, "entry %d", i)
		assert.Same(t, c, collByName(d.Name), "-coll %s", d.Name)
		assert.NotNil(t, c.nvls, "%s: nvls runner", d.Name)
		if d.Moves {
			assert.NotNil(t, c.nccl, "%s: NCCL runner", d.Name)
			assert.NotNil(t, c.want, "%s: check", d.Name)
			assert.NotNil(t, c.traffic, "%s: traffic model", d.Name)
		}
	}
}
