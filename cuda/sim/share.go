package sim

import (
	"bytes"
	"encoding/binary"
	"fmt"
	"os"
	"path/filepath"
	"sync/atomic"

	"github.com/nvls-go/nvls/cuda"
	"github.com/nvls-go/nvls/internal/posixfd"
)

// export is an exported shareable handle. A POSIX FD export is a real,
// unlinked temporary file; the node recognises it (and any dup of it, in
// this process, e.g. one passed through a unix socket) by its inode. Like
// the driver's, an open exported FD keeps the memory alive: the reference
// is dropped once no FD in the process refers to the file any more.
type export struct {
	key   [2]uint64 // st_dev, st_ino (POSIX) or {node, id} (fabric)
	fd    int       // the FD handed out (POSIX)
	alloc *physAlloc
	mc    *mcObject
	posix bool
}

var fabricMagic = [8]byte{'N', 'V', 'L', 'S', 'S', 'I', 'M', 1}

var nodeSeq atomic.Uint64

// sweepExportsLocked drops the references of exported FDs that are closed
// everywhere in the process.
func (n *Node) sweepExportsLocked() {
	any := false
	for _, e := range n.exports {
		if e.posix {
			any = true
			break
		}
	}
	if !any {
		return
	}
	open := openFDKeys()
	if open == nil {
		return
	}
	for k, e := range n.exports {
		if !e.posix || open[e.key] {
			continue
		}
		delete(n.exports, k)
		n.exportUnrefLocked(e)
	}
}

func (n *Node) exportUnrefLocked(e *export) {
	if e.alloc != nil {
		n.allocUnrefLocked(e.alloc)
	} else if e.mc != nil {
		n.mcUnrefLocked(e.mc)
	}
}

// MemExportToShareableHandle is cuMemExportToShareableHandle, for
// allocations and multicast objects. The handle type must have been
// requested when the object was created, and the handle not imported:
// the driver refuses to export an imported handle again with
// CUDA_ERROR_INVALID_VALUE (580.159.04, internal/simdiff; seen for
// allocations, applied to multicast objects alike).
func (n *Node) MemExportToShareableHandle(h cuda.MemHandle, t cuda.HandleType) (cuda.ShareableHandle, error) {
	return get(n.call("cuMemExportToShareableHandle", -1, uint64(h), uint64(t), 0), func(c *call) (cuda.ShareableHandle, error) {
		if t != cuda.HandlePosixFD && t != cuda.HandleFabric {
			return cuda.ShareableHandle{}, c.errf(cuda.ErrorInvalidValue, "handle type %v: export one of posix-fd or fabric", t)
		}
		if err := n.checkHandleTypes(c.op, t); err != nil {
			return cuda.ShareableHandle{}, err
		}
		n.mu.Lock()
		defer n.mu.Unlock()
		hd, err := n.userHandleLocked(c.op, h)
		if err != nil {
			return cuda.ShareableHandle{}, err
		}
		if hd.alloc != nil {
			c.device(hd.alloc.dev)
		}
		if hd.imported {
			return cuda.ShareableHandle{}, c.errf(cuda.ErrorInvalidValue, "handle %#x was imported: an imported handle cannot be exported again", uint64(h))
		}
		if requested := hd.handleTypes(); requested&t == 0 {
			return cuda.ShareableHandle{}, c.errf(cuda.ErrorInvalidValue, "handle %#x was created without %v among its requested handle types (%v)", uint64(h), t, requested)
		}
		e := &export{alloc: hd.alloc, mc: hd.mc}
		if t == cuda.HandleFabric {
			id := n.newID()
			e.key = [2]uint64{n.fabricNodeID(), id}
			var fh cuda.FabricHandle
			copy(fh[:8], fabricMagic[:])
			binary.LittleEndian.PutUint64(fh[8:], e.key[0])
			binary.LittleEndian.PutUint64(fh[16:], id)
			// Fabric exports hold no reference: there is nothing to close.
			n.fabric[id] = e
			return cuda.ShareableHandle{Type: cuda.HandleFabric, Fabric: fh}, nil
		}
		n.sweepExportsLocked()
		path := filepath.Join(os.TempDir(), fmt.Sprintf("nvls-sim-%d-%d-%d", os.Getpid(), n.fabricNodeID(), n.newID()))
		fd, err := createExportFile(path)
		if err != nil {
			return cuda.ShareableHandle{}, c.errf(cuda.ErrorOutOfMemory, "creating the file behind the exported FD: %v", err)
		}
		key, err := fdKey(fd)
		if err != nil {
			_ = posixfd.Close(fd)
			return cuda.ShareableHandle{}, c.errf(cuda.ErrorUnknown, "fstat of the exported FD: %v", err)
		}
		e.key, e.fd, e.posix = key, fd, true
		n.exports[key] = e
		if e.alloc != nil {
			e.alloc.refs++
		} else {
			e.mc.refs++
		}
		return cuda.ShareableHandle{Type: cuda.HandlePosixFD, FD: fd}, nil
	})
}

// fabricNodeID is a number that tells this node from other nodes of the
// process in fabric handles and export file names.
func (n *Node) fabricNodeID() uint64 {
	for {
		if v := n.seq.Load(); v != 0 {
			return v
		}
		n.seq.CompareAndSwap(0, nodeSeq.Add(1))
	}
}

// MemImportFromShareableHandle is cuMemImportFromShareableHandle: a new
// handle to the same memory (or multicast object). It does not close the
// FD.
func (n *Node) MemImportFromShareableHandle(sh cuda.ShareableHandle) (cuda.MemHandle, error) {
	return get(n.call("cuMemImportFromShareableHandle", -1, uint64(sh.Type), uint64(sh.FD), 0), func(c *call) (cuda.MemHandle, error) {
		if err := n.checkHandleTypes(c.op, sh.Type); err != nil {
			return 0, err
		}
		n.mu.Lock()
		defer n.mu.Unlock()
		var e *export
		switch sh.Type {
		case cuda.HandlePosixFD:
			key, err := fdKey(sh.FD)
			if err != nil {
				return 0, c.errf(cuda.ErrorInvalidValue, "FD %d: %v", sh.FD, err)
			}
			e = n.exports[key]
			if e == nil {
				return 0, c.errf(cuda.ErrorInvalidValue, "FD %d is not a handle exported by this node", sh.FD)
			}
		case cuda.HandleFabric:
			if !bytes.Equal(sh.Fabric[:8], fabricMagic[:]) || binary.LittleEndian.Uint64(sh.Fabric[8:]) != n.fabricNodeID() {
				return 0, c.errf(cuda.ErrorInvalidValue, "fabric handle was not exported by this node")
			}
			e = n.fabric[binary.LittleEndian.Uint64(sh.Fabric[16:])]
			if e == nil || (e.alloc != nil && e.alloc.refs == 0) || (e.mc != nil && e.mc.refs == 0) {
				return 0, c.errf(cuda.ErrorInvalidValue, "fabric handle refers to memory that was freed")
			}
		default:
			return 0, c.errf(cuda.ErrorInvalidValue, "handle type %v cannot be imported", sh.Type)
		}
		hd := &handle{id: cuda.MemHandle(n.newID()), alloc: e.alloc, mc: e.mc, userRefs: 1, imported: true}
		if e.alloc != nil {
			e.alloc.refs++
			c.device(e.alloc.dev)
		} else {
			e.mc.refs++
		}
		n.handles[hd.id] = hd
		return hd.id, nil
	})
}
