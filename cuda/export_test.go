package cuda

import "github.com/ebitengine/purego"

// OpenPathForTest opens the driver library at path, with RTLD_LOCAL so that
// a fake library's symbols stay out of the process's global namespace.
func OpenPathForTest(path string) (*Lib, error) {
	return openLib(path, purego.RTLD_NOW|purego.RTLD_LOCAL)
}
