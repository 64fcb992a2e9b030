//go:build amd64 && !noasm

#include "textflag.h"

// AVX2+FMA versions of exp32 and the GELU kernels, 8 lanes at a time. Every
// lane runs the same instructions whatever its position, and the last
// partial vector is loaded and stored with a lane mask instead of a scalar
// loop, so an element's result does not depend on where a slice starts or
// ends (and so not on how a kernel is split over threads).

// Float32 constants, broadcast where used.
DATA vmc<>+0(SB)/4, $0xc2aeac4f   // -87.33654: below, exp is not a normal float32
DATA vmc<>+4(SB)/4, $0x42b00000   // 88: above, 2^k would overflow the exponent field
DATA vmc<>+8(SB)/4, $0x3fb8aa3b   // log2(e)
DATA vmc<>+12(SB)/4, $0x3f318000  // ln2 high part (Cody–Waite)
DATA vmc<>+16(SB)/4, $0xb95e8083  // ln2 low part
DATA vmc<>+20(SB)/4, $0x39506967  // Cephes expf polynomial, highest degree first
DATA vmc<>+24(SB)/4, $0x3ab743ce
DATA vmc<>+28(SB)/4, $0x3c088908
DATA vmc<>+32(SB)/4, $0x3d2aa9c1
DATA vmc<>+36(SB)/4, $0x3e2aaaaa
DATA vmc<>+40(SB)/4, $0x3f000000
DATA vmc<>+44(SB)/4, $0x3f800000  // 1.0; as an integer, the exponent bias 127<<23
DATA vmc<>+48(SB)/4, $0x7f800000  // +Inf
DATA vmc<>+52(SB)/4, $0x3f3504f3  // 1/√2
DATA vmc<>+56(SB)/4, $0x3f000000  // 0.5
DATA vmc<>+60(SB)/4, $0x3e2ef945  // erfcc polynomial (Numerical Recipes), highest degree first
DATA vmc<>+64(SB)/4, $0xbf527892
DATA vmc<>+68(SB)/4, $0x3fbe87b0
DATA vmc<>+72(SB)/4, $0xbf914e5d
DATA vmc<>+76(SB)/4, $0x3e8ec7cc
DATA vmc<>+80(SB)/4, $0xbe3ec24c
DATA vmc<>+84(SB)/4, $0x3dc636c9
DATA vmc<>+88(SB)/4, $0x3ebf88fb
DATA vmc<>+92(SB)/4, $0x3f8000c7
DATA vmc<>+96(SB)/4, $0xbfa1fc4e
DATA vmc<>+100(SB)/4, $0x3ecc422a // 1/√(2π)
DATA vmc<>+104(SB)/4, $0xbf000000 // -0.5
DATA vmc<>+108(SB)/4, $0x7fffffff // |x| mask
GLOBL vmc<>(SB), RODATA|NOPTR, $112

// Lane masks for the last partial vector: 8 lanes on, then 8 off; the mask
// for r lanes starts at byte 32 − 4r.
DATA tailmask<>+0(SB)/8, $0xffffffffffffffff
DATA tailmask<>+8(SB)/8, $0xffffffffffffffff
DATA tailmask<>+16(SB)/8, $0xffffffffffffffff
DATA tailmask<>+24(SB)/8, $0xffffffffffffffff
DATA tailmask<>+32(SB)/8, $0
DATA tailmask<>+40(SB)/8, $0
DATA tailmask<>+48(SB)/8, $0
DATA tailmask<>+56(SB)/8, $0
GLOBL tailmask<>(SB), RODATA|NOPTR, $64

// e = exp(a), a unchanged; t1–t3 are clobbered. a is clamped to
// [-87.34, 88] (max/min with a as the second operand, so NaN passes
// through), split as k·ln2 + r with |r| ≤ ln2/2, e^r from the degree-7
// polynomial, and 2^k built in the exponent bits. Lanes below the range get
// 0 (the true value would be a float32 denormal or 0), lanes above it +Inf.
#define EXP(a, e, t1, t2, t3) \
	VBROADCASTSS vmc<>+0(SB), t1;  \
	VMAXPS       a, t1, e;         \
	VBROADCASTSS vmc<>+4(SB), t1;  \
	VMINPS       e, t1, e;         \
	VBROADCASTSS vmc<>+8(SB), t1;  \
	VMULPS       e, t1, t1;        \
	VROUNDPS     $0, t1, t1;       \
	VBROADCASTSS vmc<>+12(SB), t2; \
	VFNMADD231PS t2, t1, e;        \
	VBROADCASTSS vmc<>+16(SB), t2; \
	VFNMADD231PS t2, t1, e;        \
	VCVTPS2DQ    t1, t1;           \
	VPSLLD       $23, t1, t1;      \
	VPBROADCASTD vmc<>+44(SB), t2; \
	VPADDD       t2, t1, t1;       \
	VBROADCASTSS vmc<>+20(SB), t3; \
	VBROADCASTSS vmc<>+24(SB), t2; \
	VFMADD213PS  t2, e, t3;        \
	VBROADCASTSS vmc<>+28(SB), t2; \
	VFMADD213PS  t2, e, t3;        \
	VBROADCASTSS vmc<>+32(SB), t2; \
	VFMADD213PS  t2, e, t3;        \
	VBROADCASTSS vmc<>+36(SB), t2; \
	VFMADD213PS  t2, e, t3;        \
	VBROADCASTSS vmc<>+40(SB), t2; \
	VFMADD213PS  t2, e, t3;        \
	VMULPS       e, e, t2;         \
	VFMADD213PS  e, t2, t3;        \
	VBROADCASTSS vmc<>+44(SB), t2; \
	VADDPS       t2, t3, t3;       \
	VMULPS       t1, t3, e;        \
	VBROADCASTSS vmc<>+0(SB), t2;  \
	VCMPPS       $1, t2, a, t3;    \
	VANDNPS      e, t3, e;         \
	VBROADCASTSS vmc<>+4(SB), t2;  \
	VCMPPS       $1, a, t2, t3;    \
	VBROADCASTSS vmc<>+48(SB), t2; \
	VBLENDVPS    t3, t2, e, e

// Y9 = Φ(x) for x in Y0, as erfc(|x|/√2)/2 on the negative side and
// 1 − that on the positive side, with erfcHalf's fit. Unlike erfcHalf, the
// exponent p − x²/2 is one float32 FMA, rounded once: a relative error of
// about 3e-8·x² in the result, which only shows in the far negative tail,
// where Φ is below 1e-6 (TestGELUVecAccuracy). Leaves |x| in Y3. Clobbers
// Y4–Y10.
#define PHI \
	VBROADCASTSS vmc<>+108(SB), Y3; \
	VANDPS       Y0, Y3, Y3;        \
	VBROADCASTSS vmc<>+52(SB), Y4;  \
	VMULPS       Y3, Y4, Y4;        \
	VBROADCASTSS vmc<>+56(SB), Y5;  \
	VBROADCASTSS vmc<>+44(SB), Y6;  \
	VFMADD213PS  Y6, Y5, Y4;        \
	VDIVPS       Y4, Y6, Y4;        \
	VBROADCASTSS vmc<>+60(SB), Y5;  \
	VBROADCASTSS vmc<>+64(SB), Y7;  \
	VFMADD213PS  Y7, Y4, Y5;        \
	VBROADCASTSS vmc<>+68(SB), Y7;  \
	VFMADD213PS  Y7, Y4, Y5;        \
	VBROADCASTSS vmc<>+72(SB), Y7;  \
	VFMADD213PS  Y7, Y4, Y5;        \
	VBROADCASTSS vmc<>+76(SB), Y7;  \
	VFMADD213PS  Y7, Y4, Y5;        \
	VBROADCASTSS vmc<>+80(SB), Y7;  \
	VFMADD213PS  Y7, Y4, Y5;        \
	VBROADCASTSS vmc<>+84(SB), Y7;  \
	VFMADD213PS  Y7, Y4, Y5;        \
	VBROADCASTSS vmc<>+88(SB), Y7;  \
	VFMADD213PS  Y7, Y4, Y5;        \
	VBROADCASTSS vmc<>+92(SB), Y7;  \
	VFMADD213PS  Y7, Y4, Y5;        \
	VBROADCASTSS vmc<>+96(SB), Y7;  \
	VFMADD213PS  Y7, Y4, Y5;        \
	VBROADCASTSS vmc<>+104(SB), Y6; \
	VMULPS       Y3, Y6, Y6;        \
	VFMADD213PS  Y5, Y3, Y6;        \
	EXP(Y6, Y7, Y8, Y9, Y10);       \
	VMULPS       Y7, Y4, Y7;        \
	VBROADCASTSS vmc<>+56(SB), Y8;  \
	VMULPS       Y8, Y7, Y7;        \
	VBROADCASTSS vmc<>+44(SB), Y8;  \
	VSUBPS       Y7, Y8, Y8;        \
	VBLENDVPS    Y0, Y7, Y8, Y9

// Y1 = x·Φ(x) for x in Y0.
#define GELU \
	PHI;                \
	VMULPS Y9, Y0, Y1

// Y1 = dy·(Φ(x) + x·φ(x)) for x in Y0, dy in Y2.
#define GELUBACK \
	PHI;                             \
	VBROADCASTSS vmc<>+104(SB), Y10; \
	VMULPS       Y3, Y10, Y10;       \
	VMULPS       Y3, Y10, Y10;       \
	EXP(Y10, Y11, Y12, Y13, Y14);    \
	VBROADCASTSS vmc<>+100(SB), Y12; \
	VMULPS       Y12, Y11, Y11;      \
	VFMADD231PS  Y11, Y0, Y9;        \
	VMULPS       Y9, Y2, Y1

// One SGD-with-momentum update of w in Y0, g in Y1, buf in Y2 (lr, wd,
// mom, damp in Y10–Y13): Y2 = mom·buf + damp·(g + wd·w), Y0 = w − lr·Y2.
#define SGDMOM \
	VMULPS Y11, Y0, Y3; \
	VADDPS Y3, Y1, Y3;  \
	VMULPS Y12, Y2, Y2; \
	VMULPS Y13, Y3, Y3; \
	VADDPS Y3, Y2, Y2;  \
	VMULPS Y10, Y2, Y3; \
	VSUBPS Y3, Y0, Y0

// Y15 = the lane mask for CX (1–7) remaining elements.
#define TAILMASK \
	LEAQ    tailmask<>+32(SB), AX; \
	SHLQ    $2, CX;                \
	SUBQ    CX, AX;                \
	VMOVUPS (AX), Y15

// func expSumAVX2(dst, src *float32, n int, scale, shift float32) float64
TEXT ·expSumAVX2(SB), NOSPLIT, $0-40
	MOVQ         dst+0(FP), DI
	MOVQ         src+8(FP), SI
	MOVQ         n+16(FP), CX
	VBROADCASTSS scale+24(FP), Y13
	VBROADCASTSS shift+28(FP), Y14
	VXORPD       Y11, Y11, Y11
	VXORPD       Y12, Y12, Y12

expLoop:
	CMPQ         CX, $8
	JLT          expTail
	VMOVUPS      (SI), Y0
	VFMSUB213PS  Y14, Y13, Y0
	EXP(Y0, Y1, Y2, Y3, Y4)
	VMOVUPS      Y1, (DI)
	VCVTPS2PD    X1, Y2
	VADDPD       Y2, Y11, Y11
	VEXTRACTF128 $1, Y1, X2
	VCVTPS2PD    X2, Y2
	VADDPD       Y2, Y12, Y12
	ADDQ         $32, SI
	ADDQ         $32, DI
	SUBQ         $8, CX
	JMP          expLoop

expTail:
	TESTQ        CX, CX
	JZ           expDone
	TAILMASK
	VMASKMOVPS   (SI), Y15, Y0
	VFMSUB213PS  Y14, Y13, Y0
	EXP(Y0, Y1, Y2, Y3, Y4)
	VANDPS       Y15, Y1, Y1
	VMASKMOVPS   Y1, Y15, (DI)
	VCVTPS2PD    X1, Y2
	VADDPD       Y2, Y11, Y11
	VEXTRACTF128 $1, Y1, X2
	VCVTPS2PD    X2, Y2
	VADDPD       Y2, Y12, Y12

expDone:
	VADDPD       Y12, Y11, Y11
	VEXTRACTF128 $1, Y11, X12
	VADDPD       X12, X11, X11
	VHADDPD      X11, X11, X11
	VZEROUPPER
	MOVSD        X11, ret+32(FP)
	RET

// func geluAVX2(y, x *float32, n int)
TEXT ·geluAVX2(SB), NOSPLIT, $0-24
	MOVQ y+0(FP), DI
	MOVQ x+8(FP), SI
	MOVQ n+16(FP), CX

geluLoop:
	CMPQ    CX, $8
	JLT     geluTail
	VMOVUPS (SI), Y0
	GELU
	VMOVUPS Y1, (DI)
	ADDQ    $32, SI
	ADDQ    $32, DI
	SUBQ    $8, CX
	JMP     geluLoop

geluTail:
	TESTQ      CX, CX
	JZ         geluDone
	TAILMASK
	VMASKMOVPS (SI), Y15, Y0
	GELU
	VMASKMOVPS Y1, Y15, (DI)

geluDone:
	VZEROUPPER
	RET

// func geluBackwardAVX2(dx, dy, x *float32, n int)
TEXT ·geluBackwardAVX2(SB), NOSPLIT, $0-32
	MOVQ dx+0(FP), DI
	MOVQ dy+8(FP), DX
	MOVQ x+16(FP), SI
	MOVQ n+24(FP), CX

gbLoop:
	CMPQ    CX, $8
	JLT     gbTail
	VMOVUPS (SI), Y0
	VMOVUPS (DX), Y2
	GELUBACK
	VMOVUPS Y1, (DI)
	ADDQ    $32, SI
	ADDQ    $32, DX
	ADDQ    $32, DI
	SUBQ    $8, CX
	JMP     gbLoop

gbTail:
	TESTQ      CX, CX
	JZ         gbDone
	TAILMASK
	VMASKMOVPS (SI), Y15, Y0
	VMASKMOVPS (DX), Y15, Y2
	GELUBACK
	VMASKMOVPS Y1, Y15, (DI)

gbDone:
	VZEROUPPER
	RET

// func reluAVX2(y, x *float32, n int)
// y = x where x > 0 or x is NaN, else +0: a compare (not-less-or-equal,
// unordered true) and a mask, the same bits as relu's Go loop.
TEXT ·reluAVX2(SB), NOSPLIT, $0-24
	MOVQ   y+0(FP), DI
	MOVQ   x+8(FP), SI
	MOVQ   n+16(FP), CX
	VXORPS Y14, Y14, Y14

reluLoop:
	CMPQ    CX, $16
	JLT     reluOne
	VMOVUPS (SI), Y0
	VMOVUPS 32(SI), Y2
	VCMPPS  $6, Y14, Y0, Y1
	VCMPPS  $6, Y14, Y2, Y3
	VANDPS  Y0, Y1, Y1
	VANDPS  Y2, Y3, Y3
	VMOVUPS Y1, (DI)
	VMOVUPS Y3, 32(DI)
	ADDQ    $64, SI
	ADDQ    $64, DI
	SUBQ    $16, CX
	JMP     reluLoop

reluOne:
	CMPQ    CX, $8
	JLT     reluTail
	VMOVUPS (SI), Y0
	VCMPPS  $6, Y14, Y0, Y1
	VANDPS  Y0, Y1, Y1
	VMOVUPS Y1, (DI)
	ADDQ    $32, SI
	ADDQ    $32, DI
	SUBQ    $8, CX

reluTail:
	TESTQ      CX, CX
	JZ         reluDone
	TAILMASK
	VMASKMOVPS (SI), Y15, Y0
	VCMPPS     $6, Y14, Y0, Y1
	VANDPS     Y0, Y1, Y1
	VMASKMOVPS Y1, Y15, (DI)

reluDone:
	VZEROUPPER
	RET

// func reluBackwardAVX2(dx, dy, x *float32, n int)
// dx = dy where x > 0 (ordered: NaN gives 0), else +0.
TEXT ·reluBackwardAVX2(SB), NOSPLIT, $0-32
	MOVQ   dx+0(FP), DI
	MOVQ   dy+8(FP), DX
	MOVQ   x+16(FP), SI
	MOVQ   n+24(FP), CX
	VXORPS Y14, Y14, Y14

rbLoop:
	CMPQ    CX, $8
	JLT     rbTail
	VMOVUPS (SI), Y0
	VCMPPS  $0x1e, Y14, Y0, Y1
	VANDPS  (DX), Y1, Y1
	VMOVUPS Y1, (DI)
	ADDQ    $32, SI
	ADDQ    $32, DX
	ADDQ    $32, DI
	SUBQ    $8, CX
	JMP     rbLoop

rbTail:
	TESTQ      CX, CX
	JZ         rbDone
	TAILMASK
	VMASKMOVPS (SI), Y15, Y0
	VMASKMOVPS (DX), Y15, Y2
	VCMPPS     $0x1e, Y14, Y0, Y1
	VANDPS     Y2, Y1, Y1
	VMASKMOVPS Y1, Y15, (DI)

rbDone:
	VZEROUPPER
	RET

// func sgdMomentumAVX2(p, grad, buf *float32, n int, lr, wd, mom, damp float32)
// The SGD update with momentum after the first step, without Nesterov:
// d = g + wd·w; b = mom·buf + damp·d; buf = b; p = w − lr·b. Multiplies and
// adds are rounded separately (no FMA), as in sgdStep's Go loop, so both
// give the same bits.
TEXT ·sgdMomentumAVX2(SB), NOSPLIT, $0-48
	MOVQ         p+0(FP), DI
	MOVQ         grad+8(FP), SI
	MOVQ         buf+16(FP), DX
	MOVQ         n+24(FP), CX
	VBROADCASTSS lr+32(FP), Y10
	VBROADCASTSS wd+36(FP), Y11
	VBROADCASTSS mom+40(FP), Y12
	VBROADCASTSS damp+44(FP), Y13

sgdLoop:
	CMPQ    CX, $8
	JLT     sgdTail
	VMOVUPS (DI), Y0
	VMOVUPS (SI), Y1
	VMOVUPS (DX), Y2
	SGDMOM
	VMOVUPS Y2, (DX)
	VMOVUPS Y0, (DI)
	ADDQ    $32, DI
	ADDQ    $32, SI
	ADDQ    $32, DX
	SUBQ    $8, CX
	JMP     sgdLoop

sgdTail:
	TESTQ      CX, CX
	JZ         sgdDone
	TAILMASK
	VMASKMOVPS (DI), Y15, Y0
	VMASKMOVPS (SI), Y15, Y1
	VMASKMOVPS (DX), Y15, Y2
	SGDMOM
	VMASKMOVPS Y2, Y15, (DX)
	VMASKMOVPS Y0, Y15, (DI)

sgdDone:
	VZEROUPPER
	RET

// func addAVX2(d, a, b *float32, n int)
// d[i] = a[i] + b[i] for n a multiple of 8 (d may be a or b).
TEXT ·addAVX2(SB), NOSPLIT, $0-32
	MOVQ d+0(FP), DI
	MOVQ a+8(FP), SI
	MOVQ b+16(FP), DX
	MOVQ n+24(FP), CX
	SHRQ $3, CX
	JZ   adddone

addloop:
	VMOVUPS (SI), Y0
	VADDPS  (DX), Y0, Y0
	VMOVUPS Y0, (DI)
	ADDQ    $32, SI
	ADDQ    $32, DX
	ADDQ    $32, DI
	DECQ    CX
	JNZ     addloop

adddone:
	VZEROUPPER
	RET

// func sumColsAVX2(acc *float64, x *float32, rows, stride, n int)
// acc[j] += float64(x[r·stride + j]) for r = 0, 1, … rows−1 in order and
// j < n, n a multiple of 4: SumRows's float64 column sums, 4 columns a
// vector, in the scalar loop's order of additions.
TEXT ·sumColsAVX2(SB), NOSPLIT, $0-40
	MOVQ  acc+0(FP), DI
	MOVQ  x+8(FP), SI
	MOVQ  rows+16(FP), R8
	MOVQ  stride+24(FP), R9
	SHLQ  $2, R9
	MOVQ  n+32(FP), R10
	SHRQ  $2, R10
	TESTQ R8, R8
	JZ    scdone
	TESTQ R10, R10
	JZ    scdone

scrow:
	MOVQ SI, AX
	MOVQ DI, BX
	MOVQ R10, CX

sccol:
	VCVTPS2PD (AX), Y0
	VADDPD    (BX), Y0, Y0
	VMOVUPD   Y0, (BX)
	ADDQ      $16, AX
	ADDQ      $32, BX
	DECQ      CX
	JNZ       sccol
	ADDQ      R9, SI
	DECQ      R8
	JNZ       scrow

scdone:
	VZEROUPPER
	RET

// s = σ(a) and c = 1 − σ(a) for a, unchanged, from t = e^(−|a|) ≤ 1 (which
// neither overflows nor loses the small side): r = 1/(1 + t) is the larger
// of the two and t·r the smaller; a's sign picks which is σ. t1–t4 are
// clobbered.
#define SIGMOID(a, s, c, t1, t2, t3, t4) \
	VBROADCASTSS vmc<>+108(SB), t4; \
	VANDPS       a, t4, t4;         \
	VXORPS       t1, t1, t1;        \
	VSUBPS       t4, t1, t4;        \
	EXP(t4, s, t1, t2, t3);         \
	VBROADCASTSS vmc<>+44(SB), t1;  \
	VADDPS       s, t1, t2;         \
	VDIVPS       t2, t1, t2;        \
	VMULPS       s, t2, t3;         \
	VBLENDVPS    a, t3, t2, s;      \
	VBLENDVPS    a, t2, t3, c

// Y1 = silu(g)·u for g in Y0, u in Y6. Clobbers Y2–Y5, Y7.
#define SWIGLU \
	SIGMOID(Y0, Y1, Y7, Y2, Y3, Y4, Y5); \
	VMULPS Y0, Y1, Y1;                   \
	VMULPS Y6, Y1, Y1

// For g in Y0, u in Y6, dy in Y8: Y3 = dgate = dy·u·σ(g)·(1 + g·(1 − σ(g)))
// and Y10 = dup = dy·silu(g). Clobbers Y1, Y2, Y4, Y5, Y7, Y9.
#define SWIGLUBACK \
	SIGMOID(Y0, Y1, Y7, Y2, Y3, Y4, Y5); \
	VMULPS       Y0, Y1, Y9;             \
	VMULPS       Y8, Y9, Y10;            \
	VMULPS       Y0, Y7, Y2;             \
	VBROADCASTSS vmc<>+44(SB), Y3;       \
	VADDPS       Y3, Y2, Y2;             \
	VMULPS       Y1, Y2, Y2;             \
	VMULPS       Y8, Y6, Y3;             \
	VMULPS       Y2, Y3, Y3

// func swigluAVX2(y, gate, up *float32, n int)
TEXT ·swigluAVX2(SB), NOSPLIT, $0-32
	MOVQ y+0(FP), DI
	MOVQ gate+8(FP), SI
	MOVQ up+16(FP), DX
	MOVQ n+24(FP), CX

swLoop:
	CMPQ    CX, $8
	JLT     swTail
	VMOVUPS (SI), Y0
	VMOVUPS (DX), Y6
	SWIGLU
	VMOVUPS Y1, (DI)
	ADDQ    $32, SI
	ADDQ    $32, DX
	ADDQ    $32, DI
	SUBQ    $8, CX
	JMP     swLoop

swTail:
	TESTQ      CX, CX
	JZ         swDone
	TAILMASK
	VMASKMOVPS (SI), Y15, Y0
	VMASKMOVPS (DX), Y15, Y6
	SWIGLU
	VMASKMOVPS Y1, Y15, (DI)

swDone:
	VZEROUPPER
	RET

// func swigluBackwardAVX2(dgate, dup, dy, gate, up *float32, n int)
TEXT ·swigluBackwardAVX2(SB), NOSPLIT, $0-48
	MOVQ dgate+0(FP), DI
	MOVQ dup+8(FP), R8
	MOVQ dy+16(FP), R9
	MOVQ gate+24(FP), SI
	MOVQ up+32(FP), DX
	MOVQ n+40(FP), CX

sbLoop:
	CMPQ    CX, $8
	JLT     sbTail
	VMOVUPS (SI), Y0
	VMOVUPS (DX), Y6
	VMOVUPS (R9), Y8
	SWIGLUBACK
	VMOVUPS Y3, (DI)
	VMOVUPS Y10, (R8)
	ADDQ    $32, SI
	ADDQ    $32, DX
	ADDQ    $32, R9
	ADDQ    $32, DI
	ADDQ    $32, R8
	SUBQ    $8, CX
	JMP     sbLoop

sbTail:
	TESTQ      CX, CX
	JZ         sbDone
	TAILMASK
	VMASKMOVPS (SI), Y15, Y0
	VMASKMOVPS (DX), Y15, Y6
	VMASKMOVPS (R9), Y15, Y8
	SWIGLUBACK
	VMASKMOVPS Y3, Y15, (DI)
	VMASKMOVPS Y10, Y15, (R8)

sbDone:
	VZEROUPPER
	RET
