package ptx_test

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/nvls-go/nvls/internal/kabi"
	"github.com/nvls-go/nvls/kernels"
	"github.com/nvls-go/nvls/ptx"
)

const regenerate = "run `make ptx` where nvcc exists, or scripts/ptx-device.sh on the GPU machine, and commit ptx/"

func fileSHA256(t *testing.T, path string) string {
	t.Helper()
	b, err := os.ReadFile(path)
	require.NoError(t, err)
	s := sha256.Sum256(b)
	return hex.EncodeToString(s[:])
}

// TestCommittedPTX checks every committed PTX image against the sources it
// was made from and against the Go side of the ABI.
func TestCommittedPTX(t *testing.T) {
	t.Setenv(ptx.EnvDir, "")
	if len(ptx.Embedded()) == 0 {
		t.Skip("ptx/ not generated yet: " + regenerate)
	}
	header := fileSHA256(t, filepath.Join("..", "kernels", "nvls.h"))
	for _, src := range kernels.Sources {
		cu := fileSHA256(t, filepath.Join("..", "kernels", src+".cu"))
		for _, f := range ptx.Flavors {
			t.Run(ptx.FileName(src, f), func(t *testing.T) {
				img, err := ptx.Image(src, f)
				require.NoError(t, err, regenerate)
				p, err := ptx.ParseProvenance(img)
				require.NoError(t, err, regenerate)
				assert.Equal(t, "kernels/"+src+".cu", p.Source)
				require.Equal(t, cu, p.SourceSHA256, "kernels/%s.cu changed since ptx/%s was generated: %s", src, ptx.FileName(src, f), regenerate)
				require.Equal(t, header, p.HeaderSHA256, "kernels/nvls.h changed since ptx/%s was generated: %s", ptx.FileName(src, f), regenerate)
				assert.Equal(t, f.Suffix(), p.Flavor)

				maj, min, err := ptx.Version(img)
				require.NoError(t, err)
				version := fmt.Sprintf("%d.%d", maj, min)
				assert.Equal(t, p.PTXVersion, version, ".version and the provenance line disagree")
				text := string(img)
				if f == ptx.Multicast {
					// The oldest version the instructions allow: multimem
					// needs PTX ISA 8.1, .acc::f32 8.2.
					want := "8.1"
					if strings.Contains(text, ".acc::f32") {
						want = "8.2"
					}
					assert.Contains(t, text, "multimem.")
					assert.Equal(t, want, version)
				} else {
					assert.NotContains(t, text, "multimem.")
					// Never newer than the multicast flavor of the same source.
					mc, err := ptx.Image(src, ptx.Multicast)
					require.NoError(t, err, regenerate)
					mcMaj, mcMin, err := ptx.Version(mc)
					require.NoError(t, err)
					assert.LessOrEqual(t, maj*100+min, mcMaj*100+mcMin, "unicast PTX declares .version %s, newer than its multicast flavor", version)
				}

				got := map[string]bool{}
				for _, e := range ptx.Entries(img) {
					got[e.Name] = true
					assert.True(t, e.GridDepWait, "%s starts with kernel_entry's griddepcontrol.wait", e.Name)
					if assert.Len(t, e.Params, 1, "%s takes one param (struct nvls_params)", e.Name) {
						assert.Equal(t, kabi.ParamsSize, e.Params[0], "%s: .param size vs kabi.ParamsSize", e.Name)
						assert.Equal(t, 8, e.Align[0], "%s: .param alignment", e.Name)
					}
				}
				want := map[string]bool{}
				for _, n := range kernels.Entries(src, f) {
					want[n] = true
				}
				assert.Equal(t, want, got, "entry points of %s", ptx.FileName(src, f))
			})
		}
	}
}
