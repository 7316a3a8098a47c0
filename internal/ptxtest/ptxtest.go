package ptxtest

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/nvls-go/nvls/ptx"
)

// WriteEntryImages writes into dir, for every source and both flavors, the
// image ptx.Image would read from NVLS_PTX_DIR (ptx.FileName): PTX that
// declares entries(src, f), each taking one .param of paramSize bytes, its
// body a griddepcontrol.wait (as kernels/nvls.h's kernel_entry starts
// every kernel) and ret.
func WriteEntryImages(dir string, sources []string, entries func(src string, f ptx.Flavor) []string, paramSize int) error {
	for _, src := range sources {
		for _, f := range ptx.Flavors {
			var b strings.Builder
			fmt.Fprintf(&b, ".version 8.2\n.target sm_90\n.address_size 64\n// %s\n", src)
			for _, n := range entries(src, f) {
				fmt.Fprintf(&b, ".visible .entry %s(\n\t.param .align 8 .b8 %s_param_0[%d]\n)\n{\n\tgriddepcontrol.wait;\n\tret;\n}\n", n, n, paramSize)
			}
			if err := os.WriteFile(filepath.Join(dir, ptx.FileName(src, f)), []byte(b.String()), 0o644); err != nil {
				return fmt.Errorf("ptxtest: %w", err)
			}
		}
	}
	return nil
}
