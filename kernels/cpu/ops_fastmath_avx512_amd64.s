//go:build amd64 && !noasm

#include "textflag.h"

// AVX-512 (F and DQ) versions of the GELU kernels of ops_fastmath_amd64.s,
// 16 lanes at a time: the same instructions in the same order on each
// lane, with the AVX2 blends as mask moves (VROUNDPS as VRNDSCALEPS, the
// sign blend through VPMOVD2M), so each lane's bits are the AVX2 kernel's
// (TestGELUAVX512SameBits). zmc repeats ops_fastmath_amd64.s's vmc at the
// same offsets: a <> symbol is private to its file.

DATA zmc<>+0(SB)/4, $0xc2aeac4f   // -87.33654
DATA zmc<>+4(SB)/4, $0x42b00000   // 88
DATA zmc<>+8(SB)/4, $0x3fb8aa3b   // log2(e)
DATA zmc<>+12(SB)/4, $0x3f318000  // ln2 high part
DATA zmc<>+16(SB)/4, $0xb95e8083  // ln2 low part
DATA zmc<>+20(SB)/4, $0x39506967  // Cephes expf polynomial, highest degree first
DATA zmc<>+24(SB)/4, $0x3ab743ce
DATA zmc<>+28(SB)/4, $0x3c088908
DATA zmc<>+32(SB)/4, $0x3d2aa9c1
DATA zmc<>+36(SB)/4, $0x3e2aaaaa
DATA zmc<>+40(SB)/4, $0x3f000000
DATA zmc<>+44(SB)/4, $0x3f800000  // 1.0; as an integer, the exponent bias 127<<23
DATA zmc<>+48(SB)/4, $0x7f800000  // +Inf
DATA zmc<>+52(SB)/4, $0x3f3504f3  // 1/√2
DATA zmc<>+56(SB)/4, $0x3f000000  // 0.5
DATA zmc<>+60(SB)/4, $0x3e2ef945  // erfcc polynomial, highest degree first
DATA zmc<>+64(SB)/4, $0xbf527892
DATA zmc<>+68(SB)/4, $0x3fbe87b0
DATA zmc<>+72(SB)/4, $0xbf914e5d
DATA zmc<>+76(SB)/4, $0x3e8ec7cc
DATA zmc<>+80(SB)/4, $0xbe3ec24c
DATA zmc<>+84(SB)/4, $0x3dc636c9
DATA zmc<>+88(SB)/4, $0x3ebf88fb
DATA zmc<>+92(SB)/4, $0x3f8000c7
DATA zmc<>+96(SB)/4, $0xbfa1fc4e
DATA zmc<>+100(SB)/4, $0x3ecc422a // 1/√(2π)
DATA zmc<>+104(SB)/4, $0xbf000000 // -0.5
DATA zmc<>+108(SB)/4, $0x7fffffff // |x| mask
GLOBL zmc<>(SB), RODATA|NOPTR, $112

// e = exp(a) as ops_fastmath_amd64.s's EXP; t1–t3 and K1 clobbered.
#define EXPZ(a, e, t1, t2, t3) \
	VBROADCASTSS zmc<>+0(SB), t1;  \
	VMAXPS       a, t1, e;         \
	VBROADCASTSS zmc<>+4(SB), t1;  \
	VMINPS       e, t1, e;         \
	VBROADCASTSS zmc<>+8(SB), t1;  \
	VMULPS       e, t1, t1;        \
	VRNDSCALEPS  $0, t1, t1;       \
	VBROADCASTSS zmc<>+12(SB), t2; \
	VFNMADD231PS t2, t1, e;        \
	VBROADCASTSS zmc<>+16(SB), t2; \
	VFNMADD231PS t2, t1, e;        \
	VCVTPS2DQ    t1, t1;           \
	VPSLLD       $23, t1, t1;      \
	VPBROADCASTD zmc<>+44(SB), t2; \
	VPADDD       t2, t1, t1;       \
	VBROADCASTSS zmc<>+20(SB), t3; \
	VBROADCASTSS zmc<>+24(SB), t2; \
	VFMADD213PS  t2, e, t3;        \
	VBROADCASTSS zmc<>+28(SB), t2; \
	VFMADD213PS  t2, e, t3;        \
	VBROADCASTSS zmc<>+32(SB), t2; \
	VFMADD213PS  t2, e, t3;        \
	VBROADCASTSS zmc<>+36(SB), t2; \
	VFMADD213PS  t2, e, t3;        \
	VBROADCASTSS zmc<>+40(SB), t2; \
	VFMADD213PS  t2, e, t3;        \
	VMULPS       e, e, t2;         \
	VFMADD213PS  e, t2, t3;        \
	VBROADCASTSS zmc<>+44(SB), t2; \
	VADDPS       t2, t3, t3;       \
	VMULPS       t1, t3, e;        \
	VBROADCASTSS zmc<>+0(SB), t2;  \
	VCMPPS       $1, t2, a, K1;    \
	VPXORD       t3, t3, t3;       \
	VMOVAPS      t3, K1, e;        \
	VBROADCASTSS zmc<>+4(SB), t2;  \
	VCMPPS       $1, a, t2, K1;    \
	VBROADCASTSS zmc<>+48(SB), t2; \
	VMOVAPS      t2, K1, e

// Z9 = Φ(x) for x in Z0, as ops_fastmath_amd64.s's PHI. Leaves |x| in Z3.
// Clobbers Z4–Z10, K1 and K3.
#define PHIZ \
	VBROADCASTSS zmc<>+108(SB), Z3; \
	VANDPS       Z0, Z3, Z3;        \
	VBROADCASTSS zmc<>+52(SB), Z4;  \
	VMULPS       Z3, Z4, Z4;        \
	VBROADCASTSS zmc<>+56(SB), Z5;  \
	VBROADCASTSS zmc<>+44(SB), Z6;  \
	VFMADD213PS  Z6, Z5, Z4;        \
	VDIVPS       Z4, Z6, Z4;        \
	VBROADCASTSS zmc<>+60(SB), Z5;  \
	VBROADCASTSS zmc<>+64(SB), Z7;  \
	VFMADD213PS  Z7, Z4, Z5;        \
	VBROADCASTSS zmc<>+68(SB), Z7;  \
	VFMADD213PS  Z7, Z4, Z5;        \
	VBROADCASTSS zmc<>+72(SB), Z7;  \
	VFMADD213PS  Z7, Z4, Z5;        \
	VBROADCASTSS zmc<>+76(SB), Z7;  \
	VFMADD213PS  Z7, Z4, Z5;        \
	VBROADCASTSS zmc<>+80(SB), Z7;  \
	VFMADD213PS  Z7, Z4, Z5;        \
	VBROADCASTSS zmc<>+84(SB), Z7;  \
	VFMADD213PS  Z7, Z4, Z5;        \
	VBROADCASTSS zmc<>+88(SB), Z7;  \
	VFMADD213PS  Z7, Z4, Z5;        \
	VBROADCASTSS zmc<>+92(SB), Z7;  \
	VFMADD213PS  Z7, Z4, Z5;        \
	VBROADCASTSS zmc<>+96(SB), Z7;  \
	VFMADD213PS  Z7, Z4, Z5;        \
	VBROADCASTSS zmc<>+104(SB), Z6; \
	VMULPS       Z3, Z6, Z6;        \
	VFMADD213PS  Z5, Z3, Z6;        \
	EXPZ(Z6, Z7, Z8, Z9, Z10);      \
	VMULPS       Z7, Z4, Z7;        \
	VBROADCASTSS zmc<>+56(SB), Z8;  \
	VMULPS       Z8, Z7, Z7;        \
	VBROADCASTSS zmc<>+44(SB), Z8;  \
	VSUBPS       Z7, Z8, Z8;        \
	VPMOVD2M     Z0, K3;            \
	VBLENDMPS    Z7, Z8, K3, Z9

// Z1 = x·Φ(x) for x in Z0.
#define GELUZ \
	PHIZ;               \
	VMULPS Z9, Z0, Z1

// Z1 = dy·(Φ(x) + x·φ(x)) for x in Z0, dy in Z2.
#define GELUBACKZ \
	PHIZ;                            \
	VBROADCASTSS zmc<>+104(SB), Z10; \
	VMULPS       Z3, Z10, Z10;       \
	VMULPS       Z3, Z10, Z10;       \
	EXPZ(Z10, Z11, Z12, Z13, Z14);   \
	VBROADCASTSS zmc<>+100(SB), Z12; \
	VMULPS       Z12, Z11, Z11;      \
	VFMADD231PS  Z11, Z0, Z9;        \
	VMULPS       Z9, Z2, Z1

// K2 = the lane mask for CX (1–15) remaining elements.
#define TAILMASKZ \
	MOVL  $1, AX;  \
	SHLL  CX, AX;  \
	DECL  AX;      \
	KMOVW AX, K2

// func geluAVX512(y, x *float32, n int)
TEXT ·geluAVX512(SB), NOSPLIT, $0-24
	MOVQ y+0(FP), DI
	MOVQ x+8(FP), SI
	MOVQ n+16(FP), CX

gzLoop:
	CMPQ    CX, $16
	JLT     gzTail
	VMOVUPS (SI), Z0
	GELUZ
	VMOVUPS Z1, (DI)
	ADDQ    $64, SI
	ADDQ    $64, DI
	SUBQ    $16, CX
	JMP     gzLoop

gzTail:
	TESTQ     CX, CX
	JZ        gzDone
	TAILMASKZ
	VMOVUPS.Z (SI), K2, Z0
	GELUZ
	VMOVUPS   Z1, K2, (DI)

gzDone:
	VZEROUPPER
	RET

// func geluBackwardAVX512(dx, dy, x *float32, n int)
TEXT ·geluBackwardAVX512(SB), NOSPLIT, $0-32
	MOVQ dx+0(FP), DI
	MOVQ dy+8(FP), DX
	MOVQ x+16(FP), SI
	MOVQ n+24(FP), CX

gbzLoop:
	CMPQ    CX, $16
	JLT     gbzTail
	VMOVUPS (SI), Z0
	VMOVUPS (DX), Z2
	GELUBACKZ
	VMOVUPS Z1, (DI)
	ADDQ    $64, SI
	ADDQ    $64, DX
	ADDQ    $64, DI
	SUBQ    $16, CX
	JMP     gbzLoop

gbzTail:
	TESTQ     CX, CX
	JZ        gbzDone
	TAILMASKZ
	VMOVUPS.Z (SI), K2, Z0
	VMOVUPS.Z (DX), K2, Z2
	GELUBACKZ
	VMOVUPS   Z1, K2, (DI)

gbzDone:
	VZEROUPPER
	RET

// s = σ(a) and c = 1 − σ(a) as ops_fastmath_amd64.s's SIGMOID; t1–t4, K1
// and K3 are clobbered.
#define SIGMOIDZ(a, s, c, t1, t2, t3, t4) \
	VBROADCASTSS zmc<>+108(SB), t4; \
	VANDPS       a, t4, t4;         \
	VPXORD       t1, t1, t1;        \
	VSUBPS       t4, t1, t4;        \
	EXPZ(t4, s, t1, t2, t3);        \
	VBROADCASTSS zmc<>+44(SB), t1;  \
	VADDPS       s, t1, t2;         \
	VDIVPS       t2, t1, t2;        \
	VMULPS       s, t2, t3;         \
	VPMOVD2M     a, K3;             \
	VBLENDMPS    t3, t2, K3, s;     \
	VBLENDMPS    t2, t3, K3, c

// Z1 = silu(g)·u for g in Z0, u in Z6. Clobbers Z2–Z5, Z7.
#define SWIGLUZ \
	SIGMOIDZ(Z0, Z1, Z7, Z2, Z3, Z4, Z5); \
	VMULPS Z0, Z1, Z1;                    \
	VMULPS Z6, Z1, Z1

// For g in Z0, u in Z6, dy in Z8: Z3 = dgate, Z10 = dup, as SWIGLUBACK.
#define SWIGLUBACKZ \
	SIGMOIDZ(Z0, Z1, Z7, Z2, Z3, Z4, Z5); \
	VMULPS       Z0, Z1, Z9;              \
	VMULPS       Z8, Z9, Z10;             \
	VMULPS       Z0, Z7, Z2;              \
	VBROADCASTSS zmc<>+44(SB), Z3;        \
	VADDPS       Z3, Z2, Z2;              \
	VMULPS       Z1, Z2, Z2;              \
	VMULPS       Z8, Z6, Z3;              \
	VMULPS       Z2, Z3, Z3

// func swigluAVX512(y, gate, up *float32, n int)
TEXT ·swigluAVX512(SB), NOSPLIT, $0-32
	MOVQ y+0(FP), DI
	MOVQ gate+8(FP), SI
	MOVQ up+16(FP), DX
	MOVQ n+24(FP), CX

swzLoop:
	CMPQ    CX, $16
	JLT     swzTail
	VMOVUPS (SI), Z0
	VMOVUPS (DX), Z6
	SWIGLUZ
	VMOVUPS Z1, (DI)
	ADDQ    $64, SI
	ADDQ    $64, DX
	ADDQ    $64, DI
	SUBQ    $16, CX
	JMP     swzLoop

swzTail:
	TESTQ     CX, CX
	JZ        swzDone
	TAILMASKZ
	VMOVUPS.Z (SI), K2, Z0
	VMOVUPS.Z (DX), K2, Z6
	SWIGLUZ
	VMOVUPS   Z1, K2, (DI)

swzDone:
	VZEROUPPER
	RET

// func swigluBackwardAVX512(dgate, dup, dy, gate, up *float32, n int)
TEXT ·swigluBackwardAVX512(SB), NOSPLIT, $0-48
	MOVQ dgate+0(FP), DI
	MOVQ dup+8(FP), R8
	MOVQ dy+16(FP), R9
	MOVQ gate+24(FP), SI
	MOVQ up+32(FP), DX
	MOVQ n+40(FP), CX

sbzLoop:
	CMPQ    CX, $16
	JLT     sbzTail
	VMOVUPS (SI), Z0
	VMOVUPS (DX), Z6
	VMOVUPS (R9), Z8
	SWIGLUBACKZ
	VMOVUPS Z3, (DI)
	VMOVUPS Z10, (R8)
	ADDQ    $64, SI
	ADDQ    $64, DX
	ADDQ    $64, R9
	ADDQ    $64, DI
	ADDQ    $64, R8
	SUBQ    $16, CX
	JMP     sbzLoop

sbzTail:
	TESTQ     CX, CX
	JZ        sbzDone
	TAILMASKZ
	VMOVUPS.Z (SI), K2, Z0
	VMOVUPS.Z (DX), K2, Z6
	VMOVUPS.Z (R9), K2, Z8
	SWIGLUBACKZ
	VMOVUPS   Z3, K2, (DI)
	VMOVUPS   Z10, K2, (R8)

sbzDone:
	VZEROUPPER
	RET
