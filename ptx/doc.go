// Package ptx holds the PTX that nvcc made from kernels/*.cu, one file per
// source and flavor (<source>_uc.ptx, <source>_mc.ptx), committed and
// embedded in the binary. scripts/ptx.sh regenerates them where nvcc exists
// (`make ptx`, or on the GPU machine); each file starts with a comment line
// naming its source, the sha256 of the source and of kernels/nvls.h, and the
// nvcc version, and a test fails when a source changed and its PTX did not.
//
// NVLS_PTX_DIR, when set, names a directory to read the images from instead
// of the embedded ones (to try freshly generated PTX without rebuilding).
package ptx
