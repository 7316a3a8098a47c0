package kref

import (
	"fmt"

	"github.com/nvls-go/nvls/internal/kabi"
	"github.com/nvls-go/nvls/kernels"
)

// SmallLaunch is a valid small launch of k (out of place, a few blocks)
// on a workspace whose data area starts at data and has 512 KiB free
// there: p (with the workspace's pointers and rank filled in) completed
// with k's opcode and fields, its grid and block. The failure tests of
// the simulator and of the GPU run every kernel with it. Every family but
// the barrier takes count elements of its type (4 bytes for the untyped
// ones), send and recv 64 KiB apart (room for nranks x count), the LL
// ones an LL area 256 KiB in (1024 lines: 256 KiB for 8 ranks).
func SmallLaunch(k kernels.Kernel, p kabi.Params, data uint64) (grid, block uint32, _ kabi.Params, err error) {
	if !k.Coll.Valid() {
		return 0, 0, p, fmt.Errorf("kref.SmallLaunch: no family %v", k.Coll)
	}
	p.Opcode = k.Coll.Opcode()
	if k.Coll == kernels.CollBarrier {
		return 1, 32, p, nil
	}
	p.Send, p.Recv, p.Count, p.ElemBytes = data, data+1<<16, 1000, uint32(k.DType.Size())
	if k.Algo == kernels.LL {
		p.LLArea, p.LLLines = data+1<<18, 1024
		return 2, 64, p, nil
	}
	return 2, kabi.BlockThreads, p, nil
}
