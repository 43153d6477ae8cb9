package main

// compatGetpid makes getpid through the 32-bit x86 ABI (int 0x80): the
// syscall entry of the compat ABI the seccomp profile leaves out.
func compatGetpid() int32

const compatABI = "x86 (int 0x80)"
