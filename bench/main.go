package main

import (
	"io"
	"os"
)

func main() {
	os.Exit(launch(os.Args[1:], os.Stdout, os.Stderr))
}

// Exit statuses.
const (
	exitOK    = 0
	exitFail  = 1
	exitUsage = 2
)

// run is the program in the solo world (this process drives every GPU):
// it parses args, runs the benchmark and writes the report to stdout
// (progress and errors to stderr). It returns the exit status.
func run(args []string, stdout, stderr io.Writer) int {
	cfg, err := parseFlags(args, stderr)
	if err != nil {
		if err == errHelp {
			return exitOK
		}
		fprintf(stderr, "nvls-bench: %v\n", err)
		return exitUsage
	}
	return bench(cfg, solo{}, newOutput(stdout, stderr))
}
