package simkern

import (
	"fmt"
	"testing"

	"github.com/nvls-go/nvls/internal/kabi"
	"github.com/nvls-go/nvls/kernels"
)

// BenchmarkAllReduce64MiB measures how long the reference kernels take on
// the simulator for a 64 MiB f32 all-reduce on 8 ranks (what the
// collectives' largest sim tests cost), per algorithm and flavor. Host
// time, not GPU time.
func BenchmarkAllReduce64MiB(b *testing.B) {
	const ranks = 8
	const nbytes = 64 << 20
	for _, f := range []kernels.Flavor{kernels.Unicast, kernels.Multicast} {
		for _, algo := range kernels.Algos {
			b.Run(fmt.Sprintf("%v/%v", f, algo), func(b *testing.B) {
				w := newWorkspaceSized(b, ranks, f, 2*nbytes+4<<20)
				name := kernels.AllReduceName(kernels.F32, kernels.Sum, algo)
				b.SetBytes(nbytes)
				for b.Loop() {
					errs := w.launch(b, name, 132, kabi.BlockThreads, nil, func(r int) kabi.Params {
						p := w.params(r)
						p.Send, p.Recv, p.Count, p.ElemBytes, p.Opcode = sendOff, sendOff+nbytes+1<<20, nbytes/4, 4, kernels.OpAllReduce
						return p
					})
					for _, err := range errs {
						if err != nil {
							b.Fatal(err)
						}
					}
				}
			})
		}
	}
}
