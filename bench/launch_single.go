//go:build !mpi

package main

import "io"

// launch is the program: without -tags mpi, one process drives every GPU
// (mpi.go has the launcher for mpirun).
func launch(args []string, stdout, stderr io.Writer) int { return run(args, stdout, stderr) }
