//go:build amd64 && !noasm

#include "textflag.h"

// One k step of the 6×16 tile: two B vectors (16 floats of row p of the B
// micro-panel) times six broadcast A values (column p of the A
// micro-panel), into the twelve accumulators Y0–Y11. A's rows are at AX,
// AX+R8, AX+2·R8, R9 = AX+3·R8, R9+R8, R9+2·R8, so one kernel reads packed
// panels (R8 = 4 bytes) and unpacked row- or column-major A alike.
#define STEP \
	VMOVUPS      (BX), Y12;         \
	VMOVUPS      32(BX), Y13;       \
	VBROADCASTSS (AX), Y14;         \
	VFMADD231PS  Y12, Y14, Y0;      \
	VFMADD231PS  Y13, Y14, Y1;      \
	VBROADCASTSS (AX)(R8*1), Y15;   \
	VFMADD231PS  Y12, Y15, Y2;      \
	VFMADD231PS  Y13, Y15, Y3;      \
	VBROADCASTSS (AX)(R8*2), Y14;   \
	VFMADD231PS  Y12, Y14, Y4;      \
	VFMADD231PS  Y13, Y14, Y5;      \
	VBROADCASTSS (R9), Y15;         \
	VFMADD231PS  Y12, Y15, Y6;      \
	VFMADD231PS  Y13, Y15, Y7;      \
	VBROADCASTSS (R9)(R8*1), Y14;   \
	VFMADD231PS  Y12, Y14, Y8;      \
	VFMADD231PS  Y13, Y14, Y9;      \
	VBROADCASTSS (R9)(R8*2), Y15;   \
	VFMADD231PS  Y12, Y15, Y10;     \
	VFMADD231PS  Y13, Y15, Y11;     \
	ADDQ         R10, AX;           \
	ADDQ         R10, R9;           \
	ADDQ         R11, BX


// C row = alpha·acc (beta == 0: C is not read, so NaNs in it vanish).
#define STORE0(lo, hi) \
	VMULPS  Y14, lo, lo;   \
	VMOVUPS lo, (DI);      \
	VMULPS  Y14, hi, hi;   \
	VMOVUPS hi, 32(DI);    \
	ADDQ    SI, DI

// C row = alpha·acc + beta·C.
#define STOREB(lo, hi) \
	VMULPS      (DI), Y15, Y12;   \
	VFMADD231PS Y14, lo, Y12;     \
	VMOVUPS     Y12, (DI);        \
	VMULPS      32(DI), Y15, Y13; \
	VFMADD231PS Y14, hi, Y13;     \
	VMOVUPS     Y13, 32(DI);      \
	ADDQ        SI, DI

// func sgemmKernel6x16(k int, a *float32, rsa, ksa int, b *float32, ksb int, c *float32, ldc int, alpha, beta float32)
TEXT ·sgemmKernel6x16(SB), NOSPLIT, $0-72
	MOVQ k+0(FP), CX
	MOVQ a+8(FP), AX
	MOVQ rsa+16(FP), R8
	SHLQ $2, R8
	MOVQ ksa+24(FP), R10
	SHLQ $2, R10
	MOVQ b+32(FP), BX
	MOVQ ksb+40(FP), R11
	SHLQ $2, R11
	MOVQ c+48(FP), DI
	MOVQ ldc+56(FP), SI
	SHLQ $2, SI
	LEAQ (AX)(R8*2), R9
	ADDQ R8, R9

	// Pull the C tile towards L1 while the k loop runs.
	MOVQ DI, DX
	PREFETCHT0 (DX)
	PREFETCHT0 60(DX)
	ADDQ SI, DX
	PREFETCHT0 (DX)
	PREFETCHT0 60(DX)
	ADDQ SI, DX
	PREFETCHT0 (DX)
	PREFETCHT0 60(DX)
	ADDQ SI, DX
	PREFETCHT0 (DX)
	PREFETCHT0 60(DX)
	ADDQ SI, DX
	PREFETCHT0 (DX)
	PREFETCHT0 60(DX)
	ADDQ SI, DX
	PREFETCHT0 (DX)
	PREFETCHT0 60(DX)

	VXORPS Y0, Y0, Y0
	VXORPS Y1, Y1, Y1
	VXORPS Y2, Y2, Y2
	VXORPS Y3, Y3, Y3
	VXORPS Y4, Y4, Y4
	VXORPS Y5, Y5, Y5
	VXORPS Y6, Y6, Y6
	VXORPS Y7, Y7, Y7
	VXORPS Y8, Y8, Y8
	VXORPS Y9, Y9, Y9
	VXORPS Y10, Y10, Y10
	VXORPS Y11, Y11, Y11

loop4:
	CMPQ CX, $4
	JLT  tail
	STEP
	STEP
	STEP
	STEP
	SUBQ $4, CX
	JMP  loop4

tail:
	TESTQ CX, CX
	JEQ   store
	STEP
	DECQ CX
	JMP  tail

store:
	VBROADCASTSS alpha+64(FP), Y14
	// beta == 0 exactly (±0; a NaN beta is unordered and takes the beta path).
	VMOVSS   beta+68(FP), X15
	VXORPS   X13, X13, X13
	VUCOMISS X13, X15
	JNE      withbeta
	JPS      withbeta
	STORE0(Y0, Y1)
	STORE0(Y2, Y3)
	STORE0(Y4, Y5)
	STORE0(Y6, Y7)
	STORE0(Y8, Y9)
	STORE0(Y10, Y11)
	VZEROUPPER
	RET

withbeta:
	VBROADCASTSS beta+68(FP), Y15
	STOREB(Y0, Y1)
	STOREB(Y2, Y3)
	STOREB(Y4, Y5)
	STOREB(Y6, Y7)
	STOREB(Y8, Y9)
	STOREB(Y10, Y11)
	VZEROUPPER
	RET

// 8×8 transpose of the rows in Y0–Y7 into columns in Y8–Y15 (column q of
// the block ends up in register 8+q), clobbering Y0–Y7.
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

// func packB16N(dst, src *float32, ldb, kc int)
// dst[p·16+j] = src[p·ldb+j] for p < kc, j < 16: rows of B copied whole.
TEXT ·packB16N(SB), NOSPLIT, $0-32
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ ldb+16(FP), R8
	SHLQ $2, R8
	MOVQ kc+24(FP), CX
	LEAQ (SI)(R8*2), R9

pbn2:
	CMPQ CX, $2
	JLT  pbn1
	VMOVUPS (SI), Y0
	VMOVUPS 32(SI), Y1
	VMOVUPS (SI)(R8*1), Y2
	VMOVUPS 32(SI)(R8*1), Y3
	VMOVUPS Y0, (DI)
	VMOVUPS Y1, 32(DI)
	VMOVUPS Y2, 64(DI)
	VMOVUPS Y3, 96(DI)
	LEAQ (SI)(R8*2), SI
	ADDQ $128, DI
	SUBQ $2, CX
	JMP  pbn2

pbn1:
	TESTQ CX, CX
	JEQ   pbndone
	VMOVUPS (SI), Y0
	VMOVUPS 32(SI), Y1
	VMOVUPS Y0, (DI)
	VMOVUPS Y1, 32(DI)

pbndone:
	VZEROUPPER
	RET

// func packB16T(dst, src *float32, ldb, kc8 int)
// dst[p·16+j] = src[j·ldb+p] for p < kc8 (a positive multiple of 8),
// j < 16: sixteen rows of Bᵀ transposed 8×8 at a time.
TEXT ·packB16T(SB), NOSPLIT, $0-32
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ ldb+16(FP), R8
	SHLQ $2, R8
	MOVQ kc8+24(FP), CX
	LEAQ (SI)(R8*2), R9
	ADDQ R8, R9           // row 3
	LEAQ (R9)(R8*2), R10
	ADDQ R8, R10          // row 6
	LEAQ (R10)(R8*2), R11 // row 8
	LEAQ (R11)(R8*2), R12
	ADDQ R8, R12          // row 11
	LEAQ (R12)(R8*2), R13
	ADDQ R8, R13          // row 14

pbt:
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
	VMOVUPS Y9, 64(DI)
	VMOVUPS Y10, 128(DI)
	VMOVUPS Y11, 192(DI)
	VMOVUPS Y12, 256(DI)
	VMOVUPS Y13, 320(DI)
	VMOVUPS Y14, 384(DI)
	VMOVUPS Y15, 448(DI)
	VMOVUPS (R11), Y0
	VMOVUPS (R11)(R8*1), Y1
	VMOVUPS (R11)(R8*2), Y2
	VMOVUPS (R12), Y3
	VMOVUPS (R12)(R8*1), Y4
	VMOVUPS (R12)(R8*2), Y5
	VMOVUPS (R13), Y6
	VMOVUPS (R13)(R8*1), Y7
	TRANSPOSE8
	VMOVUPS Y8, 32(DI)
	VMOVUPS Y9, 96(DI)
	VMOVUPS Y10, 160(DI)
	VMOVUPS Y11, 224(DI)
	VMOVUPS Y12, 288(DI)
	VMOVUPS Y13, 352(DI)
	VMOVUPS Y14, 416(DI)
	VMOVUPS Y15, 480(DI)
	ADDQ $32, SI
	ADDQ $32, R9
	ADDQ $32, R10
	ADDQ $32, R11
	ADDQ $32, R12
	ADDQ $32, R13
	ADDQ $512, DI
	SUBQ $8, CX
	JNZ  pbt
	VZEROUPPER
	RET

// Stores the first six floats of column register Y into (DI) and moves DI
// to the next k step of the 6-wide panel.
#define STORE6(x, y) \
	VMOVUPS      x, (DI);       \
	VEXTRACTF128 $1, y, X0;     \
	VMOVQ        X0, 16(DI);    \
	ADDQ         $24, DI

// func packA6N(dst, src *float32, lda, kc8 int)
// dst[p·6+i] = src[i·lda+p] for p < kc8 (a positive multiple of 8), i < 6:
// six rows of A transposed 8 columns at a time (rows 6 and 7 of the 8×8
// block are zero and not stored).
TEXT ·packA6N(SB), NOSPLIT, $0-32
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ lda+16(FP), R8
	SHLQ $2, R8
	MOVQ kc8+24(FP), CX
	LEAQ (SI)(R8*2), R9
	ADDQ R8, R9           // row 3

pan:
	VMOVUPS (SI), Y0
	VMOVUPS (SI)(R8*1), Y1
	VMOVUPS (SI)(R8*2), Y2
	VMOVUPS (R9), Y3
	VMOVUPS (R9)(R8*1), Y4
	VMOVUPS (R9)(R8*2), Y5
	VXORPS  Y6, Y6, Y6
	VXORPS  Y7, Y7, Y7
	TRANSPOSE8
	STORE6(X8, Y8)
	STORE6(X9, Y9)
	STORE6(X10, Y10)
	STORE6(X11, Y11)
	STORE6(X12, Y12)
	STORE6(X13, Y13)
	STORE6(X14, Y14)
	STORE6(X15, Y15)
	ADDQ $32, SI
	ADDQ $32, R9
	SUBQ $8, CX
	JNZ  pan
	VZEROUPPER
	RET

// func packA6T(dst, src *float32, lda, kc int)
// dst[p·6+i] = src[p·lda+i] for p < kc, i < 6: six contiguous values of
// each row of Aᵀ.
TEXT ·packA6T(SB), NOSPLIT, $0-32
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ lda+16(FP), R8
	SHLQ $2, R8
	MOVQ kc+24(FP), CX

pat:
	VMOVUPS (SI), X0
	VMOVQ   16(SI), X1
	VMOVUPS X0, (DI)
	VMOVQ   X1, 16(DI)
	ADDQ    R8, SI
	ADDQ    $24, DI
	DECQ    CX
	JNZ     pat
	RET
