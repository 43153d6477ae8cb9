#include "textflag.h"

// func compatGetpid() int32
// getpid (20) through the 32-bit x86 entry point, int 0x80.
TEXT ·compatGetpid(SB), NOSPLIT, $0-4
	MOVL $20, AX
	INT $0x80
	MOVL AX, ret+0(FP)
	RET
