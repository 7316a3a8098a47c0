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
	return readmeBlocksOf(t, readme, title, "go")
}

// readmeBlocksOf returns the code blocks of language lang of the README's
// section title.
func readmeBlocksOf(t *testing.T, readme, title, lang string) []string {
	t.Helper()
	_, sec, ok := strings.Cut(readme, "\n## "+title+"\n")
	require.True(t, ok, "README.md has no section %q", title)
	sec, _, _ = strings.Cut(sec, "\n## ")
	var blocks []string
	for _, m := range regexp.MustCompile("(?s)```"+lang+"\n(.*?)```").FindAllStringSubmatch(sec, -1) {
		blocks = append(blocks, m[1])
	}
	return blocks
}

// TestREADME: the README's program and install recipe are the code the
// tests run. Its "Using it" section shows onGPUs (readme_gpu_test.go, run
// on GPUs) and allReduce (example_readme_test.go, Example_readme),
// character for character; its "On a laptop" recipe (a sh block) runs
// line by line, as written, in a fresh directory beside a stand-in for
// the checkout (a link to this tree), its "# main.go" line writing the
// laptop main.go with that allReduce; the last line's output is what the
// README says it prints. Offline: the module cache stands in for the
// proxy.
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
	recipe := readmeBlocksOf(t, readme, "On a laptop", "sh")
	require.Len(t, recipe, 1, "On a laptop: the install recipe")
	m := regexp.MustCompile("(?s)`go run .` prints `(.*?)`").FindStringSubmatch(readme)
	require.NotNil(t, m, "README.md says what the laptop program prints")
	want := strings.Join(strings.Fields(m[1]), " ")

	if testing.Short() {
		t.Skip("-short: not building the README's program")
	}
	if _, err := exec.LookPath("go"); err != nil {
		t.Skipf("no go command to build the README's program with: %v", err)
	}
	root, err := filepath.Abs("..")
	require.NoError(t, err)
	dir := t.TempDir()
	require.NoError(t, os.Symlink(root, filepath.Join(dir, "nvls"))) // the checkout
	env := append(os.Environ(), "GOPROXY=off", "GOSUMDB=off", "GOWORK=off", "GOTOOLCHAIN=local", "GOFLAGS=")
	var out []byte
	wroteMain := false
	for _, line := range strings.Split(strings.TrimSpace(recipe[0]), "\n") {
		line = strings.TrimSpace(line)
		switch {
		case strings.HasPrefix(line, "#"):
			if strings.Contains(line, "main.go") {
				require.NoError(t, os.WriteFile(filepath.Join(dir, "main.go"), []byte(laptop[0]+"\n"+using[1]), 0o644))
				wroteMain = true
			}
			continue
		case strings.HasPrefix(line, "cd "):
			dir = filepath.Join(dir, strings.TrimSpace(strings.TrimPrefix(line, "cd ")))
			continue
		}
		cmd := exec.Command("sh", "-c", line)
		cmd.Dir, cmd.Env = dir, env
		out, err = cmd.CombinedOutput()
		require.NoError(t, err, "README recipe line %q:\n%s", line, out)
	}
	require.True(t, wroteMain, "the recipe says where main.go is written")
	assert.Equal(t, want, strings.TrimSpace(string(out)))
}
