package main

import (
	"context"
	"errors"
	"fmt"
	"runtime"

	"github.com/nvls-go/nvls/cuda"
	"github.com/nvls-go/nvls/nccl"
)

// Why -compare nccl gives no NCCL columns.
const (
	// noNCCLOnSim: on the simulated node.
	noNCCLOnSim = "NCCL needs real GPUs and this run is on the simulated node"
	// noNCCLShared: with ranks that share GPUs (-ranks).
	noNCCLShared = "NCCL cannot run several ranks on one GPU (a communicator with two ranks on one device fails: \"Duplicate GPU detected\")"
)

// ncclSetup is -compare nccl's side of a run: NCCL's default kernels on
// nvls's buffers, and, where the loaded NCCL has symmetric kernels for
// the collective, NCCL on symmetric memory of its own (ncclMemAlloc,
// registered with NCCL_WIN_COLL_SYMMETRIC): the fastest NCCL offers.
type ncclSetup struct {
	// runners: NCCL, then NCCL on symmetric memory where it runs.
	runners []runner
	// info describes NCCL; nil when it did not run (skipped says why).
	info    *NCCLInfo
	skipped string
	// sym describes the symmetric column; nil when there is none
	// (symSkipped says why).
	sym        *NCCLSymInfo
	symSkipped string
}

// Close closes the runners, the symmetric one first (its windows belong
// to the communicators the other destroys).
func (s *ncclSetup) Close() error {
	var errs []error
	for i := len(s.runners) - 1; i >= 0; i-- {
		errs = append(errs, s.runners[i].Close())
	}
	s.runners = nil
	return errors.Join(errs...)
}

// newNCCL starts -compare nccl's runners; tests replace it with doubles
// that run on the simulated node.
var newNCCL = startNCCL

// startNCCL loads NCCL and makes its communicators (every process, or
// all stop), and adds the symmetric column where NCCL has it.
func startNCCL(cfg *config, n *node, ours *oursRunner, bufBytes uint64) (*ncclSetup, error) {
	if n.simulated() {
		return &ncclSetup{skipped: noNCCLOnSim}, nil
	}
	sess, err := openNCCL(n)
	if err != nil {
		return nil, err
	}
	send, recv := ours.buffers()
	info := sess.info
	s := &ncclSetup{runners: []runner{&ncclRunner{s: sess, k: kindNCCL, send: send, recv: recv}}, info: &info}
	if s.symSkipped = symmetricWhyNot(cfg, sess.lib); s.symSkipped != "" {
		return s, nil
	}
	sym, err := newSymRunner(n, sess, bufBytes)
	switch {
	case errors.Is(err, nccl.ErrNotAvailable):
		s.symSkipped = err.Error()
	case err != nil:
		_ = s.Close()
		return nil, err
	default:
		s.runners = append(s.runners, sym)
		s.sym = &NCCLSymInfo{Alloc: "ncclMemAlloc", Registration: "ncclCommWindowRegister(NCCL_WIN_COLL_SYMMETRIC)", BufferBytes: bufBytes}
	}
	return s, nil
}

// symmetricWhyNot is why the run gets no symmetric NCCL column, or "":
// NCCL has no symmetric kernel for the run's collective, type and
// operator, or the loaded NCCL has no symmetric memory.
func symmetricWhyNot(cfg *config, lib *nccl.Lib) string {
	if why := noSymKernel(cfg); why != "" {
		return why
	}
	if err := lib.Symmetric(); err != nil {
		return err.Error()
	}
	return ""
}

// noSymKernel is why NCCL has no symmetric kernel for the run's
// collective, type and operator (the table's ncclSym), or "".
func noSymKernel(cfg *config) string {
	op := opSpec{coll: cfg.coll, dtype: cfg.dtype, op: cfg.op}
	switch {
	case cfg.coll.ncclSym == nil:
		return fmt.Sprintf("NCCL has no symmetric kernel for %s", cfg.coll.Name)
	case !cfg.coll.ncclSym(op):
		return fmt.Sprintf("NCCL's symmetric kernels for %s take sum over float, half or bfloat16 only (not %s %s)", cfg.coll.Name, cfg.dtype.NCCLName(), cfg.op)
	}
	return ""
}

// ncclSession is a loaded NCCL and one communicator per local rank.
type ncclSession struct {
	n     *node
	lib   *nccl.Lib
	comms []nccl.Comm
	info  NCCLInfo
}

func openNCCL(n *node) (*ncclSession, error) {
	lib, err := nccl.Open()
	var v int
	if err == nil {
		if v, err = lib.Version(); err != nil {
			_ = lib.Close()
		}
	}
	// Every process loaded NCCL, or all stop.
	ctx, cancel := context.WithTimeout(context.Background(), n.setupTimeout())
	defer cancel()
	if serr := n.settle(ctx, "loading NCCL", err); serr != nil {
		if err == nil {
			_ = lib.Close()
		}
		return nil, serr
	}
	comms, err := n.w.ncclComms(n, lib)
	if err != nil {
		_ = lib.Close()
		return nil, err
	}
	return &ncclSession{n: n, lib: lib, comms: comms, info: NCCLInfo{
		Version: v, VersionText: nccl.VersionString(v), Library: lib.Path(), NVLSEnable: nccl.NVLSSetting(),
	}}, nil
}

// Close destroys the communicators and unloads NCCL.
func (s *ncclSession) Close() error {
	var errs []error
	for r, c := range s.comms {
		if err := s.n.on(r, func() error { return s.lib.CommDestroy(c) }); err != nil {
			errs = append(errs, err)
		}
	}
	s.comms = nil
	errs = append(errs, s.lib.Close())
	return errors.Join(errs...)
}

// ncclRunner runs NCCL's collectives on the node's GPUs and streams: one
// communicator per local rank (the world makes them), every call of one
// enqueue issued inside one ncclGroupStart/End from one locked OS thread,
// each with its GPU's context current. Of kind kindNCCL it runs on
// nvls's buffers and owns the session; of kind kindNCCLSym on symmetric
// memory of its own (symmetric.go).
type ncclRunner struct {
	s          *ncclSession
	k          runnerKind
	send, recv []cuda.DevicePtr
	// wins are the symmetric buffers' windows, send and recv of every
	// local rank in turn (kindNCCLSym).
	wins []nccl.Window
}

func (x *ncclRunner) name() string {
	if x.k == kindNCCLSym {
		return "NCCL " + x.s.info.VersionText + " symmetric"
	}
	return "NCCL " + x.s.info.VersionText
}

func (x *ncclRunner) kind() runnerKind                       { return x.k }
func (x *ncclRunner) buffers() (send, recv []cuda.DevicePtr) { return x.send, x.recv }

func (x *ncclRunner) enqueue(ctx context.Context, op opSpec, send, recv []cuda.DevicePtr, k int) error {
	if err := ctx.Err(); err != nil {
		return err
	}
	runtime.LockOSThread()
	defer runtime.UnlockOSThread()
	n, lib := x.s.n, x.s.lib
	if err := lib.GroupStart(); err != nil {
		return err
	}
	var first error
	for i := 0; i < k && first == nil; i++ {
		for r := range n.size() {
			if err := n.drv.CtxSetCurrent(n.ctxs[r]); err != nil {
				first = fmt.Errorf("rank %d: %w", n.rank(r), err)
				break
			}
			if err := op.coll.nccl(lib, op, send[r], recv[r], x.s.comms[r], n.streams[r]); err != nil {
				first = fmt.Errorf("rank %d: %w", n.rank(r), err)
				break
			}
		}
	}
	if err := lib.GroupEnd(); err != nil && first == nil {
		first = err
	}
	return first
}

// wait spins on every local rank's stream, as nccl-tests' -z 1 does.
func (x *ncclRunner) wait(ctx context.Context) error { return x.s.n.spin(ctx, "blocking collective") }

// Close releases what the runner holds: the symmetric runner its
// windows and memory, the other the session.
func (x *ncclRunner) Close() error {
	if x.k == kindNCCLSym {
		return x.freeSymmetric()
	}
	return x.s.Close()
}

// The table's NCCL entries (colls.go).

func allReduceNCCL(lib *nccl.Lib, op opSpec, send, recv cuda.DevicePtr, comm nccl.Comm, s cuda.Stream) error {
	return lib.AllReduce(send, recv, op.count, ncclTypes[op.dtype], ncclOps[op.op], comm, s)
}

func broadcastNCCL(lib *nccl.Lib, op opSpec, send, recv cuda.DevicePtr, comm nccl.Comm, s cuda.Stream) error {
	return lib.Broadcast(send, recv, op.count, ncclTypes[op.dtype], op.root, comm, s)
}

func reduceScatterNCCL(lib *nccl.Lib, op opSpec, send, recv cuda.DevicePtr, comm nccl.Comm, s cuda.Stream) error {
	return lib.ReduceScatter(send, recv, op.count, ncclTypes[op.dtype], ncclOps[op.op], comm, s)
}

func allGatherNCCL(lib *nccl.Lib, op opSpec, send, recv cuda.DevicePtr, comm nccl.Comm, s cuda.Stream) error {
	return lib.AllGather(send, recv, op.count, ncclTypes[op.dtype], comm, s)
}

func reduceNCCL(lib *nccl.Lib, op opSpec, send, recv cuda.DevicePtr, comm nccl.Comm, s cuda.Stream) error {
	return lib.Reduce(send, recv, op.count, ncclTypes[op.dtype], ncclOps[op.op], op.root, comm, s)
}
