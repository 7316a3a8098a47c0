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
	out := run(t, "", []string{"NVLS_SIM=1", "NVLS_SETUP_TIMEOUT=2s", "NVLS_REAL_NCCL=" + filepath.Join(dir, "none.so")}, bin)
	if !strings.Contains(out, "PASS") {
		t.Fatalf("no PASS:\n%s", out)
	}
	t.Logf("C test passed in %v", time.Since(start))
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
