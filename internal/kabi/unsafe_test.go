package kabi

import "unsafe"

func unsafePointer(p *Params) unsafe.Pointer { return unsafe.Pointer(p) }
