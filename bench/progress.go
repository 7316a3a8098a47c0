package main

import (
	"io"
	"os"
)

// output is where a run writes: the report (out), errors and progress
// (err).
type output struct {
	out, err io.Writer
	progress *progress
}

func newOutput(stdout, stderr io.Writer) output {
	return output{out: stdout, err: stderr, progress: &progress{w: stderr, tty: terminal(stderr)}}
}

// progress says how far a long sweep is, on stderr. In a terminal it is
// one status line that the next table row (on stdout, the same terminal)
// overwrites, so that the table stays whole; elsewhere (a log) it is a
// line per size.
type progress struct {
	w     io.Writer
	tty   bool
	shown bool // a status line is on the terminal
}

// eraseLine returns to the start of the line and clears it (ANSI).
const eraseLine = "\r\x1b[K"

func (p *progress) show(msg string) {
	if !p.tty {
		fprintf(p.w, "%s\n", msg)
		return
	}
	fprintf(p.w, "%s%s", eraseLine, msg)
	p.shown = true
}

// clear removes the status line, if any, before the report goes on.
func (p *progress) clear() {
	if p.shown {
		fprintf(p.w, "%s", eraseLine)
		p.shown = false
	}
}

// terminal reports whether w is a terminal (a character device).
func terminal(w io.Writer) bool {
	f, ok := w.(interface{ Stat() (os.FileInfo, error) })
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0
}
