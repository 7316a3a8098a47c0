// Package cli is what the benchmark commands (nvls-bench, nvls-grow)
// share on the command line: byte sizes written as nccl-tests writes them
// (ParseSize, FormatSize), and the choice between the CUDA driver and the
// simulated node, with the one sentence that says which (Open, Backend).
package cli
