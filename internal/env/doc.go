// Package env reads nvls's environment variables, every one the same way:
// a value that is empty or blank is the same as unset; surrounding spaces
// are ignored; a value that is not understood is an *Error naming the
// variable, its value and what it accepts (matching ErrBad), never a
// silent default. A number past what its type holds (a size past 64
// bits, a duration past about 292 years) says first that it is out of
// range, and the limit.
//
//   - sizes (Source.Size): a whole number of bytes with an optional unit
//     K, M, G or T (powers of 1024; KiB, KB and B also), any case;
//   - durations (Source.Duration): a Go duration (90s, 500ms, 1m30s) or a
//     bare number of seconds (90, 2.5), more than zero;
//   - integers (Source.Int) in a range, and enums (Source.Enum) in any
//     case;
//   - NCCL_NVLS_ENABLE (Source.NVLSEnable): an integer as NCCL reads it
//     (decimal, 0x hex, 0 octal); 0 turns multicast off, and anything that
//     is not such an integer is an error, never "on".
//
// Every variable's name is a constant here, so that one table (Vars)
// lists them for the docs and the tests. Package team re-exports the
// error type as team.EnvError.
package env
