package nccl

import (
	"fmt"
	"sync/atomic"

	"github.com/ebitengine/purego"

	"github.com/nvls-go/nvls/cuda"
	"github.com/nvls-go/nvls/internal/dl"
)

// LibName is the library Open loads: NCCL 2's soname, found on the loader
// path (LD_LIBRARY_PATH, ldconfig's cache).
const LibName = "libnccl.so.2"

// Lib is a loaded libnccl. Its methods may be called from any goroutine;
// the rules about the current device are the caller's (see the package
// comment). Close unloads it.
type Lib struct {
	path   string
	handle uintptr
	closed atomic.Bool

	// win holds the calls of NCCL 2.27's memory windows, where the
	// library has them (window.go).
	win windowCalls

	// Setup calls, bound with RegisterFunc.
	getVersion        func(v *int32) int32
	getUniqueID       func(id *UniqueID) int32
	commInitAll       func(comms *Comm, ndev int32, devlist *int32) int32
	commInitRank      func(comm *Comm, nranks int32, id UniqueID, rank int32) int32
	commDestroy       func(c Comm) int32
	commGetAsyncError func(c Comm, res *int32) int32
	getErrorString    func(r int32) string

	// Hot calls, through SyscallN.
	groupStart    uintptr
	groupEnd      uintptr
	allReduce     uintptr
	broadcast     uintptr
	reduceScatter uintptr
	allGather     uintptr
	reduce        uintptr
}

// Open loads libnccl.so.2. Without it on the loader path the error
// matches ErrNoNCCL and says what the loader said; on other systems than
// Linux it loads nothing and the error (ErrNoNCCL) says so.
func Open() (*Lib, error) { return OpenPath(LibName) }

// OpenPath loads the NCCL library at path (a file name searched on the
// loader path, or a path with a slash).
func OpenPath(path string) (*Lib, error) {
	h, err := dl.Open(path, true)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %v", ErrNoNCCL, path, err)
	}
	l := &Lib{path: path, handle: h}
	if err := l.bind(); err != nil {
		_ = dl.Close(h)
		return nil, err
	}
	l.bindWindows()
	return l, nil
}

func (l *Lib) sym(name string) (uintptr, error) {
	p, err := dl.Sym(l.handle, name)
	if err != nil || p == 0 {
		return 0, fmt.Errorf("%w: %s has no %s (too old an NCCL?)", ErrNoNCCL, l.path, name)
	}
	return p, nil
}

func (l *Lib) bind() error {
	reg := []struct {
		name string
		fn   any
	}{
		{"ncclGetVersion", &l.getVersion},
		{"ncclGetUniqueId", &l.getUniqueID},
		{"ncclCommInitAll", &l.commInitAll},
		{"ncclCommInitRank", &l.commInitRank},
		{"ncclCommDestroy", &l.commDestroy},
		{"ncclCommGetAsyncError", &l.commGetAsyncError},
		{"ncclGetErrorString", &l.getErrorString},
	}
	for _, r := range reg {
		p, err := l.sym(r.name)
		if err != nil {
			return err
		}
		purego.RegisterFunc(r.fn, p)
	}
	raw := []struct {
		name string
		p    *uintptr
	}{
		{"ncclGroupStart", &l.groupStart},
		{"ncclGroupEnd", &l.groupEnd},
		{"ncclAllReduce", &l.allReduce},
		{"ncclBroadcast", &l.broadcast},
		{"ncclReduceScatter", &l.reduceScatter},
		{"ncclAllGather", &l.allGather},
		{"ncclReduce", &l.reduce},
	}
	for _, r := range raw {
		p, err := l.sym(r.name)
		if err != nil {
			return err
		}
		*r.p = p
	}
	return nil
}

// Path is the library as it was asked for.
func (l *Lib) Path() string { return l.path }

// Close unloads the library. Communicators must be destroyed first.
func (l *Lib) Close() error {
	if l == nil || l.closed.Swap(true) {
		return nil
	}
	if err := dl.Close(l.handle); err != nil {
		return fmt.Errorf("nccl: dlclose %s: %w", l.path, err)
	}
	return nil
}

func (l *Lib) check(op string, r int32) error {
	if r == int32(Success) {
		return nil
	}
	e := &Error{Op: op, Code: Result(r)}
	if !l.closed.Load() {
		e.Msg = l.getErrorString(r)
	}
	return e
}

func (l *Lib) usable(op string) error {
	if l == nil || l.closed.Load() {
		return fmt.Errorf("nccl: %s: %w", op, ErrClosed)
	}
	return nil
}

// Version is ncclGetVersion: e.g. 22803 for NCCL 2.28.3 (VersionString
// formats it).
func (l *Lib) Version() (int, error) {
	if err := l.usable("ncclGetVersion"); err != nil {
		return 0, err
	}
	var v int32
	if err := l.check("ncclGetVersion", l.getVersion(&v)); err != nil {
		return 0, err
	}
	return int(v), nil
}

// ErrorString is ncclGetErrorString.
func (l *Lib) ErrorString(r Result) string {
	if l.usable("ncclGetErrorString") != nil {
		return r.String()
	}
	return l.getErrorString(int32(r))
}

// GetUniqueID is ncclGetUniqueId: rank 0 calls it and hands the token to
// every rank for CommInitRank.
func (l *Lib) GetUniqueID() (UniqueID, error) {
	var id UniqueID
	if err := l.usable("ncclGetUniqueId"); err != nil {
		return id, err
	}
	return id, l.check("ncclGetUniqueId", l.getUniqueID(&id))
}

// CommInitAll is ncclCommInitAll: one communicator per device ordinal (CUDA
// runtime ordinals, which are the driver's), all in this process. comms[i]
// is rank i, on devices[i].
func (l *Lib) CommInitAll(devices []int) ([]Comm, error) {
	if err := l.usable("ncclCommInitAll"); err != nil {
		return nil, err
	}
	if len(devices) == 0 {
		return nil, fmt.Errorf("nccl: ncclCommInitAll: no devices: %w", ErrInvalidArgument)
	}
	list := make([]int32, len(devices))
	for i, d := range devices {
		if d < 0 {
			return nil, fmt.Errorf("nccl: ncclCommInitAll: device %d at index %d: %w", d, i, ErrInvalidArgument)
		}
		list[i] = int32(d)
	}
	comms := make([]Comm, len(devices))
	if err := l.check("ncclCommInitAll", l.commInitAll(&comms[0], int32(len(devices)), &list[0])); err != nil {
		return nil, err
	}
	return comms, nil
}

// CommInitRank is ncclCommInitRank for one rank of nranks; the caller's
// current device (the CUDA runtime's, which follows the current context)
// is the rank's GPU.
func (l *Lib) CommInitRank(nranks int, id UniqueID, rank int) (Comm, error) {
	if err := l.usable("ncclCommInitRank"); err != nil {
		return 0, err
	}
	if nranks <= 0 || rank < 0 || rank >= nranks {
		return 0, fmt.Errorf("nccl: ncclCommInitRank: rank %d of %d: %w", rank, nranks, ErrInvalidArgument)
	}
	var c Comm
	if err := l.check("ncclCommInitRank", l.commInitRank(&c, int32(nranks), id, int32(rank))); err != nil {
		return 0, err
	}
	return c, nil
}

// CommDestroy is ncclCommDestroy.
func (l *Lib) CommDestroy(c Comm) error {
	if err := l.usable("ncclCommDestroy"); err != nil {
		return err
	}
	if c == 0 {
		return fmt.Errorf("nccl: ncclCommDestroy: nil communicator: %w", ErrInvalidArgument)
	}
	return l.check("ncclCommDestroy", l.commDestroy(c))
}

// CommAsyncError is ncclCommGetAsyncError: nil while the communicator is
// healthy, the asynchronous error otherwise.
func (l *Lib) CommAsyncError(c Comm) error {
	if err := l.usable("ncclCommGetAsyncError"); err != nil {
		return err
	}
	var r int32
	if err := l.check("ncclCommGetAsyncError", l.commGetAsyncError(c, &r)); err != nil {
		return err
	}
	if r == int32(Success) {
		return nil
	}
	return l.check("ncclCommGetAsyncError(async)", r)
}

func (l *Lib) call(op string, fn uintptr, args ...uintptr) error {
	if err := l.usable(op); err != nil {
		return err
	}
	r, _, _ := purego.SyscallN(fn, args...)
	return l.check(op, int32(r))
}

// GroupStart is ncclGroupStart.
func (l *Lib) GroupStart() error { return l.call("ncclGroupStart", l.groupStart) }

// GroupEnd is ncclGroupEnd.
func (l *Lib) GroupEnd() error { return l.call("ncclGroupEnd", l.groupEnd) }

// AllReduce is ncclAllReduce: count elements of type t from send, reduced
// with op over every rank of c, into recv (send == recv: in place), ordered
// on stream s of c's device.
func (l *Lib) AllReduce(send, recv cuda.DevicePtr, count uint64, t DataType, op RedOp, c Comm, s cuda.Stream) error {
	return l.call("ncclAllReduce", l.allReduce,
		uintptr(send), uintptr(recv), uintptr(count), uintptr(t), uintptr(op), uintptr(c), uintptr(s))
}

// Broadcast is ncclBroadcast: root's send (count elements of type t) into
// every rank's recv (send == recv on the root: in place), on stream s.
func (l *Lib) Broadcast(send, recv cuda.DevicePtr, count uint64, t DataType, root int, c Comm, s cuda.Stream) error {
	if root < 0 {
		return fmt.Errorf("nccl: ncclBroadcast: root %d: %w", root, ErrInvalidArgument)
	}
	return l.call("ncclBroadcast", l.broadcast,
		uintptr(send), uintptr(recv), uintptr(count), uintptr(t), uintptr(root), uintptr(c), uintptr(s))
}

// ReduceScatter is ncclReduceScatter: every rank's send (nranks x
// recvcount elements of type t) reduced with op, slice r of the result
// into rank r's recv (recv == send + rank x recvcount elements: in place),
// on stream s.
func (l *Lib) ReduceScatter(send, recv cuda.DevicePtr, recvcount uint64, t DataType, op RedOp, c Comm, s cuda.Stream) error {
	return l.call("ncclReduceScatter", l.reduceScatter,
		uintptr(send), uintptr(recv), uintptr(recvcount), uintptr(t), uintptr(op), uintptr(c), uintptr(s))
}

// AllGather is ncclAllGather: every rank's send (sendcount elements of
// type t) into every rank's recv, rank r's at element r x sendcount (send
// == recv + rank x sendcount elements: in place), on stream s.
func (l *Lib) AllGather(send, recv cuda.DevicePtr, sendcount uint64, t DataType, c Comm, s cuda.Stream) error {
	return l.call("ncclAllGather", l.allGather,
		uintptr(send), uintptr(recv), uintptr(sendcount), uintptr(t), uintptr(c), uintptr(s))
}

// Reduce is ncclReduce: count elements of type t reduced with op over
// every rank's send into root's recv (send == recv on the root: in place;
// recv is not used on the other ranks), on stream s.
func (l *Lib) Reduce(send, recv cuda.DevicePtr, count uint64, t DataType, op RedOp, root int, c Comm, s cuda.Stream) error {
	if root < 0 {
		return fmt.Errorf("nccl: ncclReduce: root %d: %w", root, ErrInvalidArgument)
	}
	return l.call("ncclReduce", l.reduce,
		uintptr(send), uintptr(recv), uintptr(count), uintptr(t), uintptr(op), uintptr(root), uintptr(c), uintptr(s))
}
