#include "textflag.h"

// func cpuid(leaf, sub uint32) (eax, ebx, ecx, edx uint32)
TEXT ·cpuid(SB), NOSPLIT|NOFRAME, $0-24
	MOVL leaf+0(FP), AX
	MOVL sub+4(FP), CX
	CPUID
	MOVL AX, eax+8(FP)
	MOVL BX, ebx+12(FP)
	MOVL CX, ecx+16(FP)
	MOVL DX, edx+20(FP)
	RET

// func selectPDEP(x uint64, k uint) uint
TEXT ·selectPDEP(SB), NOSPLIT|NOFRAME, $0-24
	MOVQ x+0(FP), AX
	MOVQ k+8(FP), CX
	MOVL $1, DX
	SHLQ CX, DX
	PDEPQ AX, DX, DX
	TZCNTQ DX, AX
	MOVQ AX, ret+16(FP)
	RET
