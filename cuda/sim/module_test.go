package sim

import (
	"testing"

	"github.com/stretchr/testify/assert"
)

// TestPTXScanComments: entries and .version inside comments do not count,
// a "/" that starts no comment stays, and the answer is the same from the
// cache.
func TestPTXScanComments(t *testing.T) {
	src := "/* .entry hidden_a( */ // .entry hidden_b(\n" +
		"  .version 8.0 // a/b\n.target sm_90 /* multi\nline .entry hidden_c( */\n" +
		".visible .entry real_a(\n) { div.rn.f32 %f1, %f2, %f3; }\n" +
		"// .entry hidden_d(\n.entry real_b() {}\n/* unterminated .entry hidden_e("
	for range 2 {
		assert.Equal(t, []string{"real_a", "real_b"}, PTXEntries([]byte(src)))
		assert.True(t, isPTX([]byte(src)))
	}
	assert.False(t, isPTX([]byte("/* .version 8.0 */ .target sm_90\n.version 8.0")))
	assert.False(t, isPTX([]byte("// .version 8.0\n")))
	assert.Equal(t, "a / b c\n", string(stripComments([]byte("a / b/* x */ c// y\n"))))
}
