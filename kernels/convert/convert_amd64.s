//go:build amd64 && !noasm

#include "textflag.h"

DATA cvtAbsMask<>+0(SB)/4, $0x7fffffff
GLOBL cvtAbsMask<>(SB), RODATA|NOPTR, $4
DATA cvtInf<>+0(SB)/4, $0x7f800000
GLOBL cvtInf<>(SB), RODATA|NOPTR, $4
DATA cvtRound<>+0(SB)/4, $0x00007fff
GLOBL cvtRound<>(SB), RODATA|NOPTR, $4
DATA cvtOne<>+0(SB)/4, $0x00000001
GLOBL cvtOne<>(SB), RODATA|NOPTR, $4
DATA cvtQuiet<>+0(SB)/4, $0x00000040
GLOBL cvtQuiet<>(SB), RODATA|NOPTR, $4

// func bf16ToF32AVX2(dst *float32, src *uint16, n int)
// n is a multiple of 16: each bf16 is the upper half of its fp32.
TEXT ·bf16ToF32AVX2(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	SHRQ $4, CX
	JZ   wdone

wloop:
	VPMOVZXWD (SI), Y0
	VPMOVZXWD 16(SI), Y1
	VPSLLD    $16, Y0, Y0
	VPSLLD    $16, Y1, Y1
	VMOVDQU   Y0, (DI)
	VMOVDQU   Y1, 32(DI)
	ADDQ      $32, SI
	ADDQ      $64, DI
	DECQ      CX
	JNZ       wloop

wdone:
	VZEROUPPER
	RET

// NARROW8 rounds the 8 fp32 in reg to bf16 (ties to even; a NaN stays a
// quiet NaN) as 8 dwords holding the 16-bit results: Y10 abs mask, Y11
// +Inf, Y12 0x7fff, Y13 1, Y14 the quiet bit.
#define NARROW8(reg, tmp, nan) \
	VPAND    Y10, reg, tmp;   \
	VPCMPGTD Y11, tmp, nan;   \ // |u| > +Inf: NaN
	VPSRLD   $16, reg, tmp;   \
	VPAND    Y13, tmp, tmp;   \ // lsb of the kept half
	VPADDD   Y12, tmp, tmp;   \
	VPADDD   reg, tmp, tmp;   \
	VPSRLD   $16, tmp, tmp;   \ // rounded
	VPSRLD   $16, reg, reg;   \
	VPOR     Y14, reg, reg;   \ // quiet NaN
	VPBLENDVB nan, reg, tmp, reg

// func f32ToBF16AVX2(dst *uint16, src *float32, n int)
// n is a multiple of 16.
TEXT ·f32ToBF16AVX2(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	SHRQ $4, CX
	JZ   ndone
	VPBROADCASTD cvtAbsMask<>(SB), Y10
	VPBROADCASTD cvtInf<>(SB), Y11
	VPBROADCASTD cvtRound<>(SB), Y12
	VPBROADCASTD cvtOne<>(SB), Y13
	VPBROADCASTD cvtQuiet<>(SB), Y14

nloop:
	VMOVDQU (SI), Y0
	VMOVDQU 32(SI), Y1
	NARROW8(Y0, Y2, Y3)
	NARROW8(Y1, Y4, Y5)
	VPACKUSDW Y1, Y0, Y0   // per 128-bit lane: Y0 lo4, Y1 lo4, Y0 hi4, Y1 hi4
	VPERMQ    $0xd8, Y0, Y0
	VMOVDQU   Y0, (DI)
	ADDQ      $64, SI
	ADDQ      $32, DI
	DECQ      CX
	JNZ       nloop

ndone:
	VZEROUPPER
	RET

// func f16ToF32F16C(dst *float32, src *uint16, n int)
// n is a multiple of 16.
TEXT ·f16ToF32F16C(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	SHRQ $4, CX
	JZ   hwdone

hwloop:
	VCVTPH2PS (SI), Y0
	VCVTPH2PS 16(SI), Y1
	VMOVUPS   Y0, (DI)
	VMOVUPS   Y1, 32(DI)
	ADDQ      $32, SI
	ADDQ      $64, DI
	DECQ      CX
	JNZ       hwloop

hwdone:
	VZEROUPPER
	RET

// func f32ToF16F16C(dst *uint16, src *float32, n int)
// n is a multiple of 16; rounding to nearest even (imm 0).
TEXT ·f32ToF16F16C(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	SHRQ $4, CX
	JZ   hndone

hnloop:
	VMOVUPS   (SI), Y0
	VMOVUPS   32(SI), Y1
	VCVTPS2PH $0, Y0, (DI)
	VCVTPS2PH $0, Y1, 16(DI)
	ADDQ      $64, SI
	ADDQ      $32, DI
	DECQ      CX
	JNZ       hnloop

hndone:
	VZEROUPPER
	RET

// func bf16ToF32AVX512(dst *float32, src *uint16, n int)
// n is a multiple of 16: bf16ToF32AVX2 sixteen lanes at a time.
TEXT ·bf16ToF32AVX512(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	SHRQ $4, CX
	JZ   zwdone

zwloop:
	VPMOVZXWD (SI), Z0
	VPSLLD    $16, Z0, Z0
	VMOVDQU32 Z0, (DI)
	ADDQ      $32, SI
	ADDQ      $64, DI
	DECQ      CX
	JNZ       zwloop

zwdone:
	VZEROUPPER
	RET

// func f32ToBF16AVX512(dst *uint16, src *float32, n int)
// n is a multiple of 16: NARROW8's steps sixteen lanes at a time, the NaN
// lanes chosen through a mask register, and VPMOVDW (which truncates: the
// results fit 16 bits) in place of the pack and permute.
TEXT ·f32ToBF16AVX512(SB), NOSPLIT, $0-24
	MOVQ dst+0(FP), DI
	MOVQ src+8(FP), SI
	MOVQ n+16(FP), CX
	SHRQ $4, CX
	JZ   zndone
	VPBROADCASTD cvtAbsMask<>(SB), Z10
	VPBROADCASTD cvtInf<>(SB), Z11
	VPBROADCASTD cvtRound<>(SB), Z12
	VPBROADCASTD cvtOne<>(SB), Z13
	VPBROADCASTD cvtQuiet<>(SB), Z14

znloop:
	VMOVDQU32 (SI), Z0
	VPANDD    Z10, Z0, Z2
	VPCMPGTD  Z11, Z2, K1  // |u| > +Inf: NaN
	VPSRLD    $16, Z0, Z2
	VPANDD    Z13, Z2, Z2  // lsb of the kept half
	VPADDD    Z12, Z2, Z2
	VPADDD    Z0, Z2, Z2
	VPSRLD    $16, Z2, Z2  // rounded
	VPSRLD    $16, Z0, Z0
	VPORD     Z14, Z0, Z0  // quiet NaN
	VPBLENDMD Z0, Z2, K1, Z0
	VPMOVDW   Z0, (DI)
	ADDQ      $64, SI
	ADDQ      $32, DI
	DECQ      CX
	JNZ       znloop

zndone:
	VZEROUPPER
	RET
