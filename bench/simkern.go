package main

// The simulated node runs kernels by their Go reference implementations,
// registered by this package's init.
import _ "github.com/nvls-go/nvls/kernels/simkern"
