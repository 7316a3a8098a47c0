package ptx

import (
	"embed"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"regexp"
	"sort"
	"strconv"
	"strings"
)

// EnvDir names the environment variable that, when set, makes Image read
// <dir>/<name>_<suffix>.ptx instead of the embedded file.
const EnvDir = "NVLS_PTX_DIR"

// The embedded files. The pattern is the whole package directory (a few
// kilobytes of Go source besides the PTX) so that the package builds before
// any PTX is generated; only *.ptx files are ever served.
//
//go:embed *
var files embed.FS

// ErrNotFound is matched (errors.Is) when no image exists for a name and
// flavor: not generated yet, or not in NVLS_PTX_DIR.
var ErrNotFound = errors.New("ptx: image not found")

// FileName is the file name of the image of source name in flavor f.
func FileName(name string, f Flavor) string { return name + "_" + f.Suffix() + ".ptx" }

// Image returns the PTX of kernel source name ("allreduce", "broadcast",
// "barrier") compiled in flavor f: from $NVLS_PTX_DIR when that is set,
// else the embedded copy. The caller owns the returned slice.
func Image(name string, f Flavor) ([]byte, error) {
	if !f.Valid() {
		return nil, fmt.Errorf("ptx: invalid flavor %v", f)
	}
	if strings.ContainsAny(name, `/\`) || name == "" {
		return nil, fmt.Errorf("ptx: invalid image name %q", name)
	}
	file := FileName(name, f)
	if dir := os.Getenv(EnvDir); dir != "" {
		b, err := os.ReadFile(filepath.Join(dir, file))
		if errors.Is(err, fs.ErrNotExist) {
			return nil, fmt.Errorf("ptx: %s not in %s=%s: %w", file, EnvDir, dir, ErrNotFound)
		}
		if err != nil {
			return nil, fmt.Errorf("ptx: reading %s from %s: %w", file, EnvDir, err)
		}
		return b, nil
	}
	b, err := files.ReadFile(file)
	if err != nil {
		return nil, fmt.Errorf("ptx: %s is not embedded (run `make ptx` or scripts/ptx-device.sh on the GPU machine and commit ptx/): %w", file, ErrNotFound)
	}
	return b, nil
}

// Embedded lists the file names of the embedded PTX images, sorted.
func Embedded() []string {
	ents, err := files.ReadDir(".")
	if err != nil {
		return nil
	}
	var names []string
	for _, e := range ents {
		if !e.IsDir() && strings.HasSuffix(e.Name(), ".ptx") {
			names = append(names, e.Name())
		}
	}
	sort.Strings(names)
	return names
}

// Provenance is what the first line of a generated PTX file says about
// where it came from (scripts/ptx.sh writes it).
type Provenance struct {
	Source       string // e.g. "kernels/allreduce.cu"
	SourceSHA256 string // hex sha256 of the .cu file
	Header       string // "kernels/nvls.h"
	HeaderSHA256 string // hex sha256 of the header
	Flavor       string // "uc" or "mc"
	PTXVersion   string // the .version the file declares, e.g. "8.2"
	NVCC         string // nvcc's version, e.g. "13.0.88"
}

const provenancePrefix = "// nvls-ptx "

var provenanceKeys = map[string]func(*Provenance) *string{
	"source":        func(p *Provenance) *string { return &p.Source },
	"source_sha256": func(p *Provenance) *string { return &p.SourceSHA256 },
	"header":        func(p *Provenance) *string { return &p.Header },
	"header_sha256": func(p *Provenance) *string { return &p.HeaderSHA256 },
	"flavor":        func(p *Provenance) *string { return &p.Flavor },
	"ptx_version":   func(p *Provenance) *string { return &p.PTXVersion },
	"nvcc":          func(p *Provenance) *string { return &p.NVCC },
}

// ParseProvenance reads the provenance line that starts img.
func ParseProvenance(img []byte) (Provenance, error) {
	var p Provenance
	line, _, _ := strings.Cut(string(img), "\n")
	if !strings.HasPrefix(line, provenancePrefix) {
		return p, errors.New("ptx: image does not start with a `// nvls-ptx` provenance line (not made by scripts/ptx.sh)")
	}
	for _, kv := range strings.Fields(strings.TrimPrefix(line, provenancePrefix)) {
		k, v, ok := strings.Cut(kv, "=")
		if !ok {
			return p, fmt.Errorf("ptx: provenance field %q is not key=value", kv)
		}
		if f, ok := provenanceKeys[k]; ok {
			*f(&p) = v
		}
	}
	for k, f := range provenanceKeys {
		if *f(&p) == "" {
			return p, fmt.Errorf("ptx: provenance line lacks %s=", k)
		}
	}
	return p, nil
}

var (
	versionRE = regexp.MustCompile(`(?m)^\.version\s+(\d+)\.(\d+)\s*$`)
	entryRE   = regexp.MustCompile(`(?m)^\.visible\s+\.entry\s+([A-Za-z_][A-Za-z0-9_]*)\(\s*\n((?:\s*\.param[^\n]*\n)*)\s*\)`)
	paramRE   = regexp.MustCompile(`\.param\s+\.align\s+(\d+)\s+\.b8\s+([A-Za-z0-9_]+)\[(\d+)\]`)
)

// Version is the PTX ISA version the image declares (.version major.minor).
func Version(img []byte) (major, minor int, err error) {
	m := versionRE.FindSubmatch(img)
	if m == nil {
		return 0, 0, errors.New("ptx: no .version directive")
	}
	major, _ = strconv.Atoi(string(m[1]))
	minor, _ = strconv.Atoi(string(m[2]))
	return major, minor, nil
}

// Entry is one kernel entry point of an image and its parameter list.
type Entry struct {
	Name string
	// Params holds, per parameter, its size in bytes when it is declared
	// as `.param .align A .b8 name[SIZE]` (a by-value struct), else -1.
	Params []int
	// Align holds, per parameter, its declared .align (0 where absent).
	Align []int
}

// Entries lists the .visible .entry points of an image in file order.
func Entries(img []byte) []Entry {
	var out []Entry
	for _, m := range entryRE.FindAllSubmatch(img, -1) {
		e := Entry{Name: string(m[1])}
		for _, line := range strings.Split(strings.TrimSpace(string(m[2])), "\n") {
			line = strings.TrimSpace(strings.TrimSuffix(strings.TrimSpace(line), ","))
			if line == "" {
				continue
			}
			if pm := paramRE.FindStringSubmatch(line); pm != nil {
				a, _ := strconv.Atoi(pm[1])
				n, _ := strconv.Atoi(pm[3])
				e.Params = append(e.Params, n)
				e.Align = append(e.Align, a)
			} else {
				e.Params = append(e.Params, -1)
				e.Align = append(e.Align, 0)
			}
		}
		out = append(out, e)
	}
	return out
}
