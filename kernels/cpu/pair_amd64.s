//go:build amd64 && !noasm

#include "textflag.h"

// func pairRowsAVX2(dst *float32, lo, hi *uint16, n int)
// dst[j] = lo[j] | hi[j]<<16 (bf16 pair words) for n a multiple of 16.
TEXT ·pairRowsAVX2(SB), NOSPLIT, $0-32
	MOVQ dst+0(FP), DI
	MOVQ lo+8(FP), SI
	MOVQ hi+16(FP), DX
	MOVQ n+24(FP), CX
	SHRQ $4, CX
	JZ   pdone

ploop:
	VMOVDQU    (SI), Y0
	VMOVDQU    (DX), Y1
	VPUNPCKLWD Y1, Y0, Y2 // per lane: lo0 hi0 … lo3 hi3
	VPUNPCKHWD Y1, Y0, Y3 // per lane: lo4 hi4 … lo7 hi7
	VPERM2I128 $0x20, Y3, Y2, Y4
	VPERM2I128 $0x31, Y3, Y2, Y5
	VMOVDQU    Y4, (DI)
	VMOVDQU    Y5, 32(DI)
	ADDQ       $32, SI
	ADDQ       $32, DX
	ADDQ       $64, DI
	DECQ       CX
	JNZ        ploop

pdone:
	VZEROUPPER
	RET
