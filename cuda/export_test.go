package cuda

// OpenPathForTest opens the driver library at path, its symbols kept out
// of the process's global namespace (RTLD_LOCAL), as a fake library's
// should be.
func OpenPathForTest(path string) (*Lib, error) {
	return openLib(path, false)
}
