//go:build !gpu

package collectives_test

import (
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// readmeBlocks returns the go code blocks of the README's section title.
func readmeBlocks(t *testing.T, readme, title string) []string {
	t.Helper()
	_, sec, ok := strings.Cut(readme, "\n## "+title+"\n")
	require.True(t, ok, "README.md has no section %q", title)
	sec, _, _ = strings.Cut(sec, "\n## ")
	var blocks []string
	for _, m := range regexp.MustCompile("(?s)```go\n(.*?)```").FindAllStringSubmatch(sec, -1) {
		blocks = append(blocks, m[1])
	}
	return blocks
}

// TestREADME: the README's program is the code the tests run. Its
// "Using it" section shows onGPUs (readme_gpu_test.go, run on GPUs) and
// allReduce (example_readme_test.go, Example_readme), character for
// character; its "On a laptop" main.go, with that allReduce, builds in a
// module of its own that requires nvls (replaced by this tree) and prints
// what the README says it prints (issue 15: the README's snippet did not
// compile).
func TestREADME(t *testing.T) {
	b, err := os.ReadFile("../README.md")
	require.NoError(t, err)
	readme := string(b)
	using := readmeBlocks(t, readme, "Using it")
	require.Len(t, using, 2, "Using it: onGPUs and allReduce")
	for i, file := range []string{"readme_gpu_test.go", "example_readme_test.go"} {
		src, err := os.ReadFile(file)
		require.NoError(t, err)
		assert.Contains(t, string(src), using[i], "README.md's block %d is not in %s", i+1, file)
	}
	laptop := readmeBlocks(t, readme, "On a laptop")
	require.Len(t, laptop, 1)
	m := regexp.MustCompile("(?s)`go run .` prints `(.*?)`").FindStringSubmatch(readme)
	require.NotNil(t, m, "README.md says what the laptop program prints")
	want := strings.Join(strings.Fields(m[1]), " ")

	if testing.Short() {
		t.Skip("-short: not building the README's program")
	}
	gobin, err := exec.LookPath("go")
	if err != nil {
		t.Skipf("no go command to build the README's program with: %v", err)
	}
	root, err := filepath.Abs("..")
	require.NoError(t, err)
	dir := t.TempDir()
	gomod := "module example.com/hello\n\ngo 1.25.0\n\nrequire github.com/nvls-go/nvls v0.0.0\n\nreplace github.com/nvls-go/nvls => " + root + "\n"
	require.NoError(t, os.WriteFile(filepath.Join(dir, "go.mod"), []byte(gomod), 0o644))
	sum, err := os.ReadFile(filepath.Join(root, "go.sum"))
	require.NoError(t, err)
	require.NoError(t, os.WriteFile(filepath.Join(dir, "go.sum"), sum, 0o644))
	require.NoError(t, os.WriteFile(filepath.Join(dir, "main.go"), []byte(laptop[0]+"\n"+using[1]), 0o644))
	cmd := exec.Command(gobin, "run", ".")
	cmd.Dir = dir
	// Offline, from the module cache this tree was built with.
	cmd.Env = append(os.Environ(), "GOFLAGS=-mod=mod", "GOPROXY=off", "GOSUMDB=off", "GOWORK=off", "GOTOOLCHAIN=local")
	out, err := cmd.CombinedOutput()
	require.NoError(t, err, "go run of the README's program:\n%s", out)
	assert.Equal(t, want, strings.TrimSpace(string(out)))
}
