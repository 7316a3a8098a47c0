package ptx_test

import (
	"fmt"

	"github.com/nvls-go/nvls/ptx"
)

func ExampleParseProvenance() {
	img := []byte("// nvls-ptx source=kernels/barrier.cu source_sha256=9f header=kernels/nvls.h header_sha256=3d flavor=mc ptx_version=8.1 nvcc=13.0.88\n.version 8.1\n")
	p, err := ptx.ParseProvenance(img)
	if err != nil {
		fmt.Println(err)
		return
	}
	fmt.Println(p.Source, p.Flavor, p.PTXVersion, p.NVCC)
	// Output:
	// kernels/barrier.cu mc 8.1 13.0.88
}
