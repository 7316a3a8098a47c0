package nccl_test

import (
	"errors"
	"fmt"

	"github.com/nvls-go/nvls/nccl"
)

func ExampleVersionString() {
	fmt.Println(nccl.VersionString(22803))
	fmt.Println(nccl.VersionString(2708))
	// Output:
	// 2.28.3
	// 2.7.8
}

func ExampleOpenPath() {
	_, err := nccl.OpenPath("/nonexistent/libnccl.so.2")
	fmt.Println(errors.Is(err, nccl.ErrNoNCCL))
	// Output:
	// true
}

func ExampleError() {
	err := fmt.Errorf("rank 3: %w", &nccl.Error{Op: "ncclAllReduce", Code: nccl.InvalidArgument, Msg: "invalid argument"})
	fmt.Println(err)
	fmt.Println(errors.Is(err, nccl.ErrInvalidArgument), errors.Is(err, nccl.ErrInvalidUsage))
	// Output:
	// rank 3: nccl: ncclAllReduce: ncclInvalidArgument (4): invalid argument
	// true false
}

func ExampleLib_Symmetric() {
	lib, err := nccl.Open()
	if err != nil {
		fmt.Println("no NCCL here:", errors.Is(err, nccl.ErrNoNCCL))
		return
	}
	defer lib.Close()
	if err := lib.Symmetric(); errors.Is(err, nccl.ErrNotAvailable) {
		fmt.Println("NCCL without symmetric memory:", err)
	}
}

func ExampleErrNoWindow() {
	// A registration NCCL silently skipped is "not available" too.
	fmt.Println(errors.Is(nccl.ErrNoWindow, nccl.ErrNotAvailable))
	// Output:
	// true
}
