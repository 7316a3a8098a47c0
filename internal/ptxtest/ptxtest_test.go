package ptxtest

import (
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/nvls-go/nvls/ptx"
)

// TestWriteEntryImages: ptx.Image reads back, for each source and flavor,
// the entries asked for with their .param size.
func TestWriteEntryImages(t *testing.T) {
	dir := t.TempDir()
	entries := func(src string, f ptx.Flavor) []string {
		return []string{src + "_" + f.Suffix() + "_a", src + "_" + f.Suffix() + "_b"}
	}
	require.NoError(t, WriteEntryImages(dir, []string{"one", "two"}, entries, 24))
	t.Setenv(ptx.EnvDir, dir)
	for _, src := range []string{"one", "two"} {
		for _, f := range ptx.Flavors {
			img, err := ptx.Image(src, f)
			require.NoError(t, err)
			got := ptx.Entries(img)
			require.Len(t, got, 2)
			for i, e := range got {
				assert.Equal(t, entries(src, f)[i], e.Name)
				assert.Equal(t, []int{24}, e.Params)
				assert.True(t, e.GridDepWait)
			}
		}
	}
	_, err := ptx.Image("three", ptx.Unicast)
	assert.ErrorIs(t, err, ptx.ErrNotFound)
}
