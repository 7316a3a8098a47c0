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
	return runIn(solo{}, args, stdout, stderr, stderr)
}

// runIn is the program in world w: the usage and flag errors go to
// usage (under mpirun, rank 0's stderr only), and only process 0 writes
// -json and -plot.
func runIn(w world, args []string, stdout, stderr, usage io.Writer) int {
	cfg, err := parseFlags(args, usage)
	if err != nil {
		if err == errHelp {
			return exitOK
		}
		fprintf(usage, "nvls-bench: %v\n", err)
		return exitUsage
	}
	if w.proc() != 0 {
		cfg.jsonPath, cfg.plotPath = "", ""
	}
	return bench(cfg, w, newOutput(stdout, stderr))
}
