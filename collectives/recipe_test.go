package collectives

import (
	"testing"

	"github.com/stretchr/testify/assert"

	"github.com/nvls-go/nvls/kernels"
)

// TestEveryCollHasALaunch keeps docs/architecture.md's add-a-collective
// recipe honest on the host side: the launch dispatch is rankFuncs, with
// exactly one entry per descriptor of kernels.Colls (a collective added
// to the table without its host half fails here, not at its first call).
func TestEveryCollHasALaunch(t *testing.T) {
	for _, c := range kernels.Colls {
		assert.NotNil(t, rankFuncs[c], "%s has no entry in rankFuncs", c.Desc().Name)
	}
	assert.Len(t, rankFuncs, len(kernels.Colls), "rankFuncs entries for families kernels.Colls does not list")
}
