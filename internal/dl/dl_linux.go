package dl

import "github.com/ebitengine/purego"

// Open loads the library at path (a file name searched on the loader
// path, or a path with a slash), binding every symbol now, its symbols in
// the process's global namespace or not (global: RTLD_GLOBAL, else
// RTLD_LOCAL).
func Open(path string, global bool) (uintptr, error) {
	mode := purego.RTLD_NOW | purego.RTLD_LOCAL
	if global {
		mode = purego.RTLD_NOW | purego.RTLD_GLOBAL
	}
	return purego.Dlopen(path, mode)
}

// Sym is the address of symbol name of the library h.
func Sym(h uintptr, name string) (uintptr, error) { return purego.Dlsym(h, name) }

// Close releases the library handle h.
func Close(h uintptr) error { return purego.Dlclose(h) }
