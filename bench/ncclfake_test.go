package main

// -compare nccl's columns end to end on the simulated node, where NCCL
// cannot run: doubles of NCCL's runners run the reference collective
// (refcoll_test.go) in their place, the symmetric one on buffers of its
// own as startNCCL's does, so that the sweep, the checks, the ratios, the
// table and the JSON of both NCCL columns are tested here.

import (
	"context"
	"errors"
	"path/filepath"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"

	"github.com/nvls-go/nvls/cuda"
	"github.com/nvls-go/nvls/kernels"
)

// fakeNCCL is a double of an NCCL runner of kind k.
type fakeNCCL struct {
	n          *node
	k          runnerKind
	rc         *refColl
	send, recv []cuda.DevicePtr
	own        bool // send and recv are its own (cuMemAlloc)
}

func (f *fakeNCCL) name() string {
	if f.k == kindNCCLSym {
		return "fake NCCL symmetric"
	}
	return "fake NCCL"
}
func (f *fakeNCCL) kind() runnerKind                       { return f.k }
func (f *fakeNCCL) buffers() (send, recv []cuda.DevicePtr) { return f.send, f.recv }

func (f *fakeNCCL) enqueue(ctx context.Context, op opSpec, send, recv []cuda.DevicePtr, k int) error {
	for range k {
		if err := f.rc.launch(ctx, op, send, recv); err != nil {
			return err
		}
	}
	return nil
}

func (f *fakeNCCL) wait(ctx context.Context) error { return f.n.spin(ctx, "blocking collective") }

func (f *fakeNCCL) Close() error {
	errs := []error{f.rc.Close()}
	if f.own {
		for _, bufs := range [][]cuda.DevicePtr{f.send, f.recv} {
			for r, p := range bufs {
				errs = append(errs, f.n.on(r, func() error { return f.n.drv.MemFree(p) }))
			}
		}
	}
	return errors.Join(errs...)
}

// newFakeNCCL makes a double of kind k; the symmetric one allocates its
// buffers, the other runs on ours'. bug makes it wrong (refBug*).
func newFakeNCCL(n *node, ours *oursRunner, k runnerKind, bytes uint64, bug uint32) (*fakeNCCL, error) {
	rc, err := newRefColl(ours.tm, n, bytes, bug)
	if err != nil {
		return nil, err
	}
	f := &fakeNCCL{n: n, k: k, rc: rc}
	if k == kindNCCL {
		f.send, f.recv = ours.buffers()
		return f, nil
	}
	f.own = true
	err = n.each(func(r int) error {
		for _, dst := range []*[]cuda.DevicePtr{&f.send, &f.recv} {
			p, err := n.drv.MemAlloc(bytes)
			if err != nil {
				return err
			}
			*dst = append(*dst, p)
		}
		return nil
	})
	if err != nil {
		return nil, errors.Join(err, f.Close())
	}
	return f, nil
}

// withFakeNCCL puts the doubles in NCCL's place for the test: a default
// runner and, where NCCL has symmetric kernels for the run (the table's
// ncclSym), a symmetric one (wrong on purpose with symBug). It returns
// where the doubles made go.
func withFakeNCCL(t *testing.T, symBug uint32) *[]*fakeNCCL {
	t.Helper()
	made := &[]*fakeNCCL{}
	old := newNCCL
	newNCCL = func(cfg *config, n *node, ours *oursRunner, bytes uint64) (*ncclSetup, error) {
		def, err := newFakeNCCL(n, ours, kindNCCL, bytes, 0)
		if err != nil {
			return nil, err
		}
		*made = append(*made, def)
		s := &ncclSetup{runners: []runner{def}, info: &NCCLInfo{Version: 22803, VersionText: "2.28.3", Library: "fake", NVLSEnable: "0"}}
		if s.symSkipped = noSymKernel(cfg); s.symSkipped != "" {
			return s, nil
		}
		sym, err := newFakeNCCL(n, ours, kindNCCLSym, bytes, symBug)
		if err != nil {
			return nil, errors.Join(err, s.Close())
		}
		*made = append(*made, sym)
		s.runners = append(s.runners, sym)
		s.sym = &NCCLSymInfo{Alloc: "cuMemAlloc (fake)", Registration: "none (fake)", BufferBytes: bytes}
		return s, nil
	}
	t.Cleanup(func() { newNCCL = old })
	return made
}

// The table and the JSON with both NCCL columns: each runner checked on
// its own buffers, the ratios their time over nvls's.
func TestCompareNCCLSymmetricColumns(t *testing.T) {
	withRefColl(t, 0)
	made := withFakeNCCL(t, 0)
	js := filepath.Join(t.TempDir(), "c.json")
	code, out, errOut, node := runOnSim(t, 3, "-compare", "nccl", "-d", "bf16", "-b", "8", "-e", "16K", "-f", "8", "-n", "2", "-w", "1", "-json", js)
	require.Equal(t, exitOK, code, "stdout:\n%s\nstderr:\n%s", out, errOut)
	assert.Contains(t, out, "\n# NCCL symmetric columns: NCCL on buffers of its own (cuMemAlloc (fake), 4 KiB per rank and direction) registered with none (fake),")
	assert.Contains(t, out, center("NCCL in-place", groupWidth)+center("NCCL symmetric out-of-place", groupWidth)+center("NCCL symmetric in-place", groupWidth)+"\n")
	assert.Contains(t, out, "# NCCL symmetric avg bus bandwidth: ")
	rep := readReport(t, js)
	require.NotNil(t, rep.NCCLSym)
	assert.Empty(t, rep.NCCLSymSkipped)
	require.Len(t, rep.Rows, 4) // 8 B to 4 KiB by 8
	for _, r := range rep.Rows {
		for _, f := range []*Figures{r.NCCLOutOfPlace, r.NCCLInPlace, r.NCCLSymOutOfPlace, r.NCCLSymInPlace} {
			require.NotNil(t, f, "size %d", r.Size)
			assert.Equal(t, int64(0), f.Wrong, "size %d", r.Size)
			assert.Greater(t, f.EffBW, 0.0)
		}
		assert.InDelta(t, r.NCCLSymOutOfPlace.TimeUS/r.OutOfPlace.TimeUS, r.RatioSymOutOfPlace, 1e-12)
		assert.InDelta(t, r.NCCLSymInPlace.TimeUS/r.InPlace.TimeUS, r.RatioSymInPlace, 1e-12)
		assert.InDelta(t, r.NCCLOutOfPlace.TimeUS/r.OutOfPlace.TimeUS, r.RatioOutOfPlace, 1e-12)
	}
	assert.Zero(t, rep.Summary.NCCLSymWrong)
	assert.Greater(t, rep.Summary.NCCLSymAvgBusBW, 0.0)
	// Every row is as wide as the header: nccl-tests' 52 + 6 groups of 32.
	for _, l := range strings.Split(out, "\n") {
		if strings.HasPrefix(l, "#        (B)") || (l != "" && l[0] == ' ') {
			assert.Len(t, l, 52+6*32, "%q", l)
		}
	}
	// The symmetric runner's checks ran on its own buffers: inputs uploaded
	// to its send buffers, outputs read from its recv buffers.
	require.Len(t, *made, 2)
	sym := (*made)[1]
	require.Equal(t, kindNCCLSym, sym.k)
	addrs := func(op string) map[uint64]bool {
		m := map[uint64]bool{}
		for _, c := range node.CallsOf(op) {
			m[c.Addr] = true
		}
		return m
	}
	up, down := addrs("cuMemcpyHtoDAsync"), addrs("cuMemcpyDtoHAsync")
	for r := range 3 {
		assert.True(t, up[uint64(sym.send[r])], "rank %d: inputs into the symmetric send buffer", r)
		assert.True(t, up[uint64(sym.recv[r])], "rank %d: in place, inputs into the symmetric recv buffer", r)
		assert.True(t, down[uint64(sym.recv[r])], "rank %d: outputs from the symmetric recv buffer", r)
	}
}

// A wrong element in NCCL's symmetric column fails the run and is
// counted there, not in nvls's.
func TestNCCLSymmetricWrongCounted(t *testing.T) {
	withRefColl(t, 0)
	withFakeNCCL(t, refBugSkipFirst)
	js := filepath.Join(t.TempDir(), "w.json")
	code, out, errOut, _ := runOnSim(t, 2, "-compare", "nccl", "-b", "1K", "-e", "1K", "-n", "1", "-w", "0", "-json", js)
	assert.Equal(t, exitFail, code, out)
	assert.Equal(t, "nvls-bench: 0 wrong elements (nvls), 0 (NCCL), 2 (NCCL symmetric)\n", errOut)
	rep := readReport(t, js)
	assert.Equal(t, int64(2), rep.Summary.NCCLSymWrong)
	assert.Zero(t, rep.Summary.Wrong+rep.Summary.NCCLWrong)
	assert.Equal(t, []int64{0, 1}, rep.Rows[0].NCCLSymOutOfPlace.WrongPerRank)
	assert.Contains(t, out, "# Out of bounds values : 0 OK")
}

// No symmetric column where NCCL has no symmetric kernel: the header and
// the JSON say why.
func TestNCCLSymmetricSkipped(t *testing.T) {
	withRefColl(t, 0)
	withFakeNCCL(t, 0)
	for args, why := range map[string]string{
		"-coll broadcast": "NCCL has no symmetric kernel for broadcast",
		"-d u32":          "NCCL's symmetric kernels for allreduce take sum over float, half or bfloat16 only (not uint32 sum)",
		"-d s32 -o max":   "NCCL's symmetric kernels for allreduce take sum over float, half or bfloat16 only (not int32 max)",
	} {
		js := filepath.Join(t.TempDir(), "s.json")
		full := append(strings.Fields(args), "-compare", "nccl", "-transport", "unicast", "-b", "64", "-e", "64", "-n", "1", "-w", "0", "-json", js)
		code, out, errOut, _ := runOnSim(t, 2, full...)
		require.Equal(t, exitOK, code, "%s\nstdout:\n%s\nstderr:\n%s", args, out, errOut)
		assert.Contains(t, out, "\n# NCCL symmetric: not run: "+why+"\n", args)
		assert.NotContains(t, out, "NCCL symmetric out-of-place", args)
		rep := readReport(t, js)
		assert.Nil(t, rep.NCCLSym, args)
		assert.Equal(t, why, rep.NCCLSymSkipped, args)
		assert.NotNil(t, rep.Rows[0].NCCLOutOfPlace, args)
		assert.Nil(t, rep.Rows[0].NCCLSymOutOfPlace, args)
	}
	for _, d := range []kernels.DType{kernels.F32, kernels.F16, kernels.BF16} {
		assert.Empty(t, noSymKernel(&config{coll: collAllReduce, dtype: d, op: kernels.Sum}), d)
	}
	assert.True(t, symAnyType(opSpec{dtype: kernels.U64, op: kernels.Max}), "all-gather: any type")
}

// One rank: NCCL runs, and the header says what NCCL does with one.
func TestCompareNCCLOneRank(t *testing.T) {
	withRefColl(t, 0)
	withFakeNCCL(t, 0)
	code, out, errOut, _ := runOnSim(t, 1, "-g", "1", "-compare", "nccl", "-b", "8", "-e", "1K", "-f", "4", "-n", "1", "-w", "0")
	require.Equal(t, exitOK, code, "stdout:\n%s\nstderr:\n%s", out, errOut)
	assert.Contains(t, out, "\n# NCCL with one rank runs no communication kernel (a local copy), on symmetric memory or not\n")
	assert.Contains(t, out, "NCCL symmetric out-of-place")
}
