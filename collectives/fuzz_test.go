package collectives

import (
	"errors"
	"testing"

	"github.com/nvls-go/nvls/cuda"
	"github.com/nvls-go/nvls/internal/kabi"
	"github.com/nvls-go/nvls/kernels"
	"github.com/nvls-go/nvls/team"
)

// Pointer kinds the fuzzer builds send and recv from.
const (
	kData    = iota // the rank's data area + off
	kForeign        // the rank's cuMemAlloc buffer + off
	kRaw            // off itself as an address
	kNil            // 0
	kPeer           // rank (r+1)'s workspace as rank r maps it + off
	kMC             // the multicast alias + off
	kSame           // recv only: the same as send (in place)
	kSignal         // the rank's own workspace + off % signal area
	numKinds
)

const fuzzForeign = 64 << 10

// FuzzValidate drives the argument checks of AllReduce and Broadcast with
// arbitrary counts, types, operators, roots, pointer kinds and offsets
// (per rank, with some ranks shifted), and checks that nothing panics,
// that every refusal is an ErrInvalid (or kernels.ErrUnsupported) error,
// that pointers that can never be right are refused, and that what is
// accepted is within bounds: zero-copy offsets aligned, inside the data
// area and clear of the staging areas, the same on every rank; foreign
// pointers of the rank's device and inside their allocation.
func FuzzValidate(f *testing.F) {
	fx := newFixture(f, fixtureConfig{ranks: 3, transport: team.Multicast, dataBytes: 2 << 20, foreign: fuzzForeign,
		opts: []Option{WithStageBytes(4 << 10)}})
	c := fx.c
	f.Add(uint8(0), uint64(1000), uint8(F32), uint8(Sum), int8(0), uint8(kData), uint64(0), uint8(kData), uint64(8192), uint8(0), uint8(0))
	f.Add(uint8(0), uint64(1000), uint8(F32), uint8(Max), int8(0), uint8(kData), uint64(0), uint8(kSame), uint64(0), uint8(0), uint8(0))
	f.Add(uint8(1), uint64(77), uint8(F16), uint8(0), int8(2), uint8(kForeign), uint64(0), uint8(kData), uint64(4096), uint8(2), uint8(0))
	f.Add(uint8(0), uint64(1<<62), uint8(U64), uint8(Min), int8(0), uint8(kData), uint64(16), uint8(kData), uint64(32), uint8(0), uint8(0))
	f.Add(uint8(0), uint64(10), uint8(S32), uint8(Sum), int8(0), uint8(kPeer), uint64(0), uint8(kMC), uint64(0), uint8(0), uint8(1))
	f.Add(uint8(1), uint64(5), uint8(U32), uint8(0), int8(-1), uint8(kRaw), uint64(0x1000), uint8(kSignal), uint64(8), uint8(5), uint8(0))

	f.Fuzz(func(t *testing.T, coll uint8, count uint64, dt, op uint8, root int8, sendKind uint8, sendOff uint64, recvKind uint8, recvOff uint64, shifted, nDelta uint8) {
		c.mu.Lock()
		defer c.mu.Unlock()
		send := make([]cuda.DevicePtr, c.nlocal)
		recv := make([]cuda.DevicePtr, c.nlocal)
		for l, rs := range c.ranks {
			so, ro := sendOff, recvOff
			if shifted&(1<<l) != 0 {
				so, ro = so+16, ro+16
			}
			send[l] = fuzzPtr(fx, rs, sendKind%numKinds, so, 0)
			recv[l] = fuzzPtr(fx, rs, recvKind%numKinds, ro, send[l])
		}
		streams := fx.streams
		switch nDelta % 4 {
		case 1:
			streams = streams[:len(streams)-1]
		case 2:
			send = send[:1]
		case 3:
			recv = append(recv, recv[0])
		}
		var skip bool
		var err error
		bcast := coll%2 == 1
		var cl *call
		if bcast {
			cl = c.getCall("Broadcast")
			skip, err = c.prepareBroadcast(cl, send, recv, count, DType(dt), int(root), streams)
		} else {
			cl = c.getCall("AllReduce")
			skip, err = c.prepareAllReduce(cl, send, recv, count, DType(dt), Op(op), streams)
		}
		defer c.putCall(cl)
		if err == nil && !skip && cl.foreign {
			for l := range c.ranks {
				if err = c.checkRank(cl, l); err != nil {
					break
				}
			}
		}
		if err != nil {
			if !errors.Is(err, ErrInvalid) && !errors.Is(err, kernels.ErrUnsupported) {
				t.Fatalf("refusal that is not ErrInvalid: %v", err)
			}
			return
		}
		if skip {
			if count != 0 {
				t.Fatalf("count %d skipped", count)
			}
			return
		}
		if cl.bytes/uint64(DType(dt).Size()) != count {
			t.Fatalf("bytes %d for %d elements of %v: overflow", cl.bytes, count, DType(dt))
		}
		for l := range cl.parts {
			rs := &cl.parts[l]
			for _, k := range []struct {
				kind uint8
				used bool
				what string
			}{{sendKind % numKinds, !bcast || rs.rank == int(root), "send"}, {recvKind % numKinds, true, "recv"}} {
				if !k.used {
					continue
				}
				switch k.kind {
				case kNil, kPeer, kMC, kSignal:
					t.Fatalf("rank %d: %s of kind %d accepted", l, k.what, k.kind)
				case kSame:
					if (sendKind%numKinds == kNil || sendKind%numKinds == kPeer || sendKind%numKinds == kMC || sendKind%numKinds == kSignal) && (!bcast || rs.rank == int(root)) {
						t.Fatalf("rank %d: recv = a refused send accepted", l)
					}
				}
			}
			for _, z := range []struct {
				in  bool
				off uint64
			}{{rs.sendIn, rs.sendOff}, {rs.recvIn, rs.recvOff}} {
				if !z.in {
					continue
				}
				if z.off%kabi.VecBytes != 0 || z.off < kabi.SignalBytes || z.off+cl.bytes > c.lay.DataEnd() || z.off+cl.bytes < z.off {
					t.Fatalf("rank %d: zero-copy offset %d (+%d bytes) out of bounds or misaligned", l, z.off, cl.bytes)
				}
				if z.off < c.stageA+2*c.stageBytes && c.stageA < z.off+cl.bytes {
					t.Fatalf("rank %d: zero-copy buffer overlaps the staging areas", l)
				}
			}
			if cl.recvZC && rs.recvOff != cl.recvOff {
				t.Fatalf("rank %d: zero-copy recv at another offset", l)
			}
			if !bcast && cl.sendZC && rs.sendOff != cl.sendOff {
				t.Fatalf("rank %d: zero-copy send at another offset", l)
			}
			for _, fp := range []struct {
				chk bool
				p   cuda.DevicePtr
			}{{rs.sendChk, rs.send}, {rs.recvChk, rs.recv}} {
				if !fp.chk {
					continue
				}
				base := fx.foreign[l]
				if fp.p < base || uint64(fp.p-base)+cl.bytes > fuzzForeign {
					t.Fatalf("rank %d: foreign pointer %#x (+%d) accepted outside the rank's buffer [%#x, +%d)", l, uint64(fp.p), cl.bytes, uint64(base), fuzzForeign)
				}
			}
		}
	})
}

// fuzzPtr builds a pointer of kind k for rank rs.
func fuzzPtr(fx *fixture, rs *rankState, k uint8, off uint64, send cuda.DevicePtr) cuda.DevicePtr {
	c := fx.c
	switch k {
	case kData:
		return cuda.DevicePtr(rs.own + kabi.SignalBytes + off%(c.lay.DataEnd()))
	case kForeign:
		return fx.foreign[rs.local] + cuda.DevicePtr(off%(2*fuzzForeign))
	case kRaw:
		return cuda.DevicePtr(off)
	case kNil:
		return 0
	case kPeer:
		return cuda.DevicePtr(rs.peer[(rs.rank+1)%c.size] + off%c.lay.Size())
	case kMC:
		return cuda.DevicePtr(rs.mc + off%c.lay.Size())
	case kSame:
		return send
	default:
		return cuda.DevicePtr(rs.own + off%kabi.SignalBytes)
	}
}
