//go:build cgo

package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

// TestCOnSimulatedNode builds libnccl-nvls with the simulated node
// (-tags nvlssim), compiles testdata/shimtest.c against nccl.h with cc,
// links it to the library and runs it under NVLS_SIM=1: init (InitAll and
// a thread per rank, blocking and not), every collective against a
// reference on random data, a group, forwarding without a real NCCL,
// abort, a config of another version and bad unique ids.
func TestCOnSimulatedNode(t *testing.T) {
	if _, err := exec.LookPath("cc"); err != nil {
		t.Skip("no C compiler (cc)")
	}
	dir := t.TempDir()
	lib := filepath.Join(dir, "libnccl-nvls.so")
	run(t, "", nil, "go", "build", "-tags", "nvlssim", "-buildmode=c-shared", "-o", lib, ".")
	bin := filepath.Join(dir, "shimtest")
	run(t, "", nil, "cc", "-Wall", "-Werror", "-O1", "-I", ".", "-o", bin, "testdata/shimtest.c",
		"-L"+dir, "-lnccl-nvls", "-Wl,-rpath,"+dir, "-lpthread")
	start := time.Now()
	// 8 s: the 4 ranks' bring-ups must fit in it on a loaded 2-core machine
	// (under -race 2 s did not), and the missing rank's error waits it out.
	out := run(t, "", []string{"NVLS_SIM=1", "NVLS_SETUP_TIMEOUT=8s", "NVLS_REAL_NCCL=" + filepath.Join(dir, "none.so"), "NVLS_DEBUG=WARN"}, bin)
	if !strings.Contains(out, "PASS") {
		t.Fatalf("no PASS:\n%s", out)
	}
	// At WARN until the test sets NVLS_DEBUG=INFO and calls
	// ncclResetDebugInit, before its last ncclCommInitAll.
	if n := strings.Count(out, "ncclCommInitAll: ready"); n != 1 {
		t.Errorf("%d INFO lines of ncclCommInitAll, want 1 (the one after ncclResetDebugInit):\n%s", n, out)
	}
	t.Logf("C test passed in %v", time.Since(start))
}

// TestForwardToRealNCCL builds a stand-in for the real NCCL
// (testdata/fakenccl.c, a shared library exporting NCCL's entry points,
// counting its calls and rejecting communicators not its own) and runs
// testdata/fwdtest.c on the simulated node: with NVLS_REAL_NCCL naming
// the stand-in, every call nvls does not run reaches it on its own
// communicator, and none that nvls runs does; the stand-in's calls to its
// own entry points (bound to the shim's by the loader) come back to it;
// with the shim itself as
// the real NCCL (by NVLS_REAL_NCCL, or as libnccl.so.2 on the loader
// path), forwarded calls fail, saying so.
func TestForwardToRealNCCL(t *testing.T) {
	if _, err := exec.LookPath("cc"); err != nil {
		t.Skip("no C compiler (cc)")
	}
	dir := t.TempDir()
	lib := filepath.Join(dir, "libnccl-nvls.so")
	run(t, "", nil, "go", "build", "-tags", "nvlssim", "-buildmode=c-shared", "-o", lib, ".")
	fake := filepath.Join(dir, "fake", "libnccl.so.2")
	if err := os.Mkdir(filepath.Dir(fake), 0o755); err != nil {
		t.Fatal(err)
	}
	// -O2 -fsemantic-interposition: the stand-in calls its own entry
	// points through the PLT, as NCCL does, and its ncclCommAbort is a
	// sibling call.
	run(t, "", nil, "cc", "-Wall", "-Werror", "-O2", "-fPIC", "-fsemantic-interposition", "-shared", "-o", fake, "testdata/fakenccl.c", "-ldl")
	bin := filepath.Join(dir, "fwdtest")
	run(t, "", nil, "cc", "-Wall", "-Werror", "-O1", "-I", ".", "-o", bin, "testdata/fwdtest.c",
		"-L"+dir, "-lnccl-nvls", "-Wl,-rpath,"+dir, "-ldl")
	sim := []string{"NVLS_SIM=1", "NVLS_SETUP_TIMEOUT=5s"}
	out := run(t, "", append(sim, "NVLS_REAL_NCCL="+fake, "FAKE_NCCL="+fake, "NVLS_DEBUG=INFO"), bin, "fake")
	if !strings.Contains(out, "PASS") {
		t.Fatalf("fake: no PASS:\n%s", out)
	}
	// NVLS_DEBUG=INFO: a line for every forwarded call, naming why.
	if !strings.Contains(out, "ncclSend: forwarded") || !strings.Contains(out, "forwarding to the real NCCL") {
		t.Errorf("fake: the INFO log does not name the forwarding:\n%s", out)
	}
	out = run(t, "", append(sim, "NVLS_REAL_NCCL="+lib), bin, "self")
	if !strings.Contains(out, "PASS") {
		t.Fatalf("self by NVLS_REAL_NCCL: no PASS:\n%s", out)
	}
	// The shim as libnccl.so.2 first on the loader path, no NVLS_REAL_NCCL.
	self := filepath.Join(dir, "self")
	if err := os.Mkdir(self, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(lib, filepath.Join(self, "libnccl.so.2")); err != nil {
		t.Fatal(err)
	}
	env := append(sim, "LD_LIBRARY_PATH="+self)
	for _, e := range os.Environ() {
		if strings.HasPrefix(e, "NVLS_REAL_NCCL=") {
			t.Skip("NVLS_REAL_NCCL is set in the environment")
		}
	}
	out = run(t, "", env, bin, "self")
	if !strings.Contains(out, "PASS") {
		t.Fatalf("self as libnccl.so.2: no PASS:\n%s", out)
	}
}

// TestDefaultBuildHasNoSimulator: the library built without the tag
// refuses NVLS_SIM, and links none of the simulator.
func TestDefaultBuildHasNoSimulator(t *testing.T) {
	dir := t.TempDir()
	lib := filepath.Join(dir, "libnccl-nvls.so")
	run(t, "", nil, "go", "build", "-buildmode=c-shared", "-o", lib, ".")
	syms := run(t, "", nil, "go", "tool", "nm", lib)
	for _, s := range []string{"cuda/sim.", "kernels/simkern.", "nvlsSimSetDevice"} {
		if strings.Contains(syms, s) {
			t.Errorf("the default build holds %s", s)
		}
	}
	for _, s := range []string{"ncclAllReduce", "ncclCommInitRank", "nvlsShimIdentity"} {
		if !strings.Contains(syms, s) {
			t.Errorf("the library does not export %s", s)
		}
	}
}

func run(t *testing.T, dir string, env []string, name string, args ...string) string {
	t.Helper()
	cmd := exec.Command(name, args...)
	cmd.Dir = dir
	cmd.Env = append(os.Environ(), env...)
	out, err := cmd.CombinedOutput()
	if err != nil {
		t.Fatalf("%s %s: %v\n%s", name, strings.Join(args, " "), err, out)
	}
	return string(out)
}
