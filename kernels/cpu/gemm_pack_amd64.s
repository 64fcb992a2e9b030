//go:build amd64 && !noasm

#include "textflag.h"

// 8×8 transpose of the rows in Y0–Y7 into columns in Y8–Y15 (column q of
// the block ends up in register 8+q), clobbering Y0–Y7. As gemm_amd64.s's
// TRANSPOSE8 (macros are per file).
#define TRANSPOSE8 \
	VUNPCKLPS  Y1, Y0, Y8;         \
	VUNPCKHPS  Y1, Y0, Y9;         \
	VUNPCKLPS  Y3, Y2, Y10;        \
	VUNPCKHPS  Y3, Y2, Y11;        \
	VUNPCKLPS  Y5, Y4, Y12;        \
	VUNPCKHPS  Y5, Y4, Y13;        \
	VUNPCKLPS  Y7, Y6, Y14;        \
	VUNPCKHPS  Y7, Y6, Y15;        \
	VSHUFPS    $0x44, Y10, Y8, Y0; \
	VSHUFPS    $0xEE, Y10, Y8, Y1; \
	VSHUFPS    $0x44, Y11, Y9, Y2; \
	VSHUFPS    $0xEE, Y11, Y9, Y3; \
	VSHUFPS    $0x44, Y14, Y12, Y4; \
	VSHUFPS    $0xEE, Y14, Y12, Y5; \
	VSHUFPS    $0x44, Y15, Y13, Y6; \
	VSHUFPS    $0xEE, Y15, Y13, Y7; \
	VPERM2F128 $0x20, Y4, Y0, Y8;  \
	VPERM2F128 $0x20, Y5, Y1, Y9;  \
	VPERM2F128 $0x20, Y6, Y2, Y10; \
	VPERM2F128 $0x20, Y7, Y3, Y11; \
	VPERM2F128 $0x31, Y4, Y0, Y12; \
	VPERM2F128 $0x31, Y5, Y1, Y13; \
	VPERM2F128 $0x31, Y6, Y2, Y14; \
	VPERM2F128 $0x31, Y7, Y3, Y15

// func packT8(dst, src *float32, ld, kc8, dstride int)
// dst[p·dstride+j] = src[j·ld+p] for p < kc8 (a positive multiple of 8),
// j < 8: eight rows transposed 8×8 at a time.
TEXT ·packT8(SB), NOSPLIT, $0-40
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ ld+16(FP), R8
	SHLQ $2, R8
	MOVQ kc8+24(FP), CX
	MOVQ dstride+32(FP), DX
	SHLQ $2, DX
	LEAQ (SI)(R8*2), R9
	ADDQ R8, R9           // row 3
	LEAQ (R9)(R8*2), R10
	ADDQ R8, R10          // row 6
	LEAQ (DX)(DX*2), R11  // 3·dstride

pt8:
	VMOVUPS (SI), Y0
	VMOVUPS (SI)(R8*1), Y1
	VMOVUPS (SI)(R8*2), Y2
	VMOVUPS (R9), Y3
	VMOVUPS (R9)(R8*1), Y4
	VMOVUPS (R9)(R8*2), Y5
	VMOVUPS (R10), Y6
	VMOVUPS (R10)(R8*1), Y7
	TRANSPOSE8
	VMOVUPS Y8, (DI)
	VMOVUPS Y9, (DI)(DX*1)
	VMOVUPS Y10, (DI)(DX*2)
	VMOVUPS Y11, (DI)(R11*1)
	LEAQ    (DI)(DX*4), DI
	VMOVUPS Y12, (DI)
	VMOVUPS Y13, (DI)(DX*1)
	VMOVUPS Y14, (DI)(DX*2)
	VMOVUPS Y15, (DI)(R11*1)
	LEAQ    (DI)(DX*4), DI
	ADDQ    $32, SI
	ADDQ    $32, R9
	ADDQ    $32, R10
	SUBQ    $8, CX
	JNZ     pt8
	VZEROUPPER
	RET

// func packN8(dst, src *float32, ld, kc int)
// dst[p·8+j] = src[p·ld+j] for p < kc (≥ 1), j < 8: eight contiguous values
// of each row.
TEXT ·packN8(SB), NOSPLIT, $0-32
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ ld+16(FP), R8
	SHLQ $2, R8
	MOVQ kc+24(FP), CX

pn8:
	VMOVUPS (SI), Y0
	VMOVUPS Y0, (DI)
	ADDQ    R8, SI
	ADDQ    $32, DI
	DECQ    CX
	JNZ     pn8
	VZEROUPPER
	RET

// func packN32(dst, src *float32, ld, kc int)
// dst[p·32+j] = src[p·ld+j] for p < kc (≥ 1), j < 32: thirty-two contiguous
// values of each row.
TEXT ·packN32(SB), NOSPLIT, $0-32
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ ld+16(FP), R8
	SHLQ $2, R8
	MOVQ kc+24(FP), CX

pn32:
	VMOVUPS (SI), Y0
	VMOVUPS 32(SI), Y1
	VMOVUPS 64(SI), Y2
	VMOVUPS 96(SI), Y3
	VMOVUPS Y0, (DI)
	VMOVUPS Y1, 32(DI)
	VMOVUPS Y2, 64(DI)
	VMOVUPS Y3, 96(DI)
	ADDQ    R8, SI
	ADDQ    $128, DI
	DECQ    CX
	JNZ     pn32
	VZEROUPPER
	RET
