package env

import (
	"os"
	"strings"
	"testing"

	"github.com/stretchr/testify/assert"
	"github.com/stretchr/testify/require"
)

// TestREADMENamesEveryVariable: the README's account of the environment
// stays true: it names every variable this package reads.
func TestREADMENamesEveryVariable(t *testing.T) {
	b, err := os.ReadFile("../../README.md")
	require.NoError(t, err)
	for _, v := range Vars {
		assert.True(t, strings.Contains(string(b), "`"+v), "README.md does not name %s", v)
	}
}
