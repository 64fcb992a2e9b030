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

// func packPairs32(dst *float32, src *uint16, ld, kc int)
// dst[p·32+j] = src[2p·ld+j] | src[(2p+1)·ld+j]<<16 for p < kc (≥ 1),
// j < 32: a 32-column B micro-panel of bf16 pair words packed straight
// from rows 2p and 2p+1 of the 16-bit matrix (pairRowsAVX2's shuffle on
// two row pairs of 16 values per k step).
TEXT ·packPairs32(SB), NOSPLIT, $0-32
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ ld+16(FP), R8
	SHLQ $1, R8          // one row in bytes
	LEAQ (SI)(R8*1), DX  // row 2p+1
	SHLQ $1, R8          // two rows
	MOVQ kc+24(FP), CX

kloop:
	VMOVDQU    (SI), Y0
	VMOVDQU    32(SI), Y1
	VMOVDQU    (DX), Y2
	VMOVDQU    32(DX), Y3
	VPUNPCKLWD Y2, Y0, Y4
	VPUNPCKHWD Y2, Y0, Y5
	VPUNPCKLWD Y3, Y1, Y6
	VPUNPCKHWD Y3, Y1, Y7
	VPERM2I128 $0x20, Y5, Y4, Y8
	VPERM2I128 $0x31, Y5, Y4, Y9
	VPERM2I128 $0x20, Y7, Y6, Y10
	VPERM2I128 $0x31, Y7, Y6, Y11
	VMOVDQU    Y8, (DI)
	VMOVDQU    Y9, 32(DI)
	VMOVDQU    Y10, 64(DI)
	VMOVDQU    Y11, 96(DI)
	ADDQ       R8, SI
	ADDQ       R8, DX
	ADDQ       $128, DI
	DECQ       CX
	JNZ        kloop

	VZEROUPPER
	RET
