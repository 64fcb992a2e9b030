package cpu

// Packing copies a micro-panel of op(A) or op(B) into the order the
// micro-kernel reads it, each k step's mr (or nr) values adjacent. The
// kernel then streams both operands with unit stride from L1/L2 whatever the
// transposes and leading dimensions were (no cache-set conflicts between
// rows a power of two apart, no TLB misses), and a panel that runs past the
// matrix edge is zero-padded so the kernel needs no edge case.

// packAPanelGo packs rows ≤ mr rows and kc columns of op(A) starting at a[0]
// (element (i, p) at a[i·lda+p], or a[p·lda+i] when trans) into
// dst[:kc·mr] as dst[p·mr+i], zero-padding rows past rows.
func packAPanelGo(dst, a []float32, lda int, trans bool, rows, kc, mr int) {
	d := dst[:kc*mr]
	if rows < mr {
		clear(d)
	}
	if trans {
		for p := range kc {
			copy(d[p*mr:p*mr+rows], a[p*lda:p*lda+rows])
		}
		return
	}
	for i := range rows {
		row := a[i*lda : i*lda+kc]
		for p, v := range row {
			d[p*mr+i] = v
		}
	}
}

// packBPanelGo packs kc rows and cols ≤ nr columns of op(B) starting at
// b[0] (element (p, j) at b[p·ldb+j], or b[j·ldb+p] when trans) into
// dst[:kc·nr] as dst[p·nr+j], zero-padding columns past cols.
func packBPanelGo(dst, b []float32, ldb int, trans bool, cols, kc, nr int) {
	d := dst[:kc*nr]
	if cols < nr {
		clear(d)
	}
	if !trans {
		for p := range kc {
			copy(d[p*nr:p*nr+cols], b[p*ldb:p*ldb+cols])
		}
		return
	}
	for j := range cols {
		row := b[j*ldb : j*ldb+kc]
		for p, v := range row {
			d[p*nr+j] = v
		}
	}
}

// packAPanel12 is packAPanelGo for 12 full rows of a row-major op(A):
// k steps outer, so that each step's 12 values are written together (the
// generic order writes 12 strided streams).
func packAPanel12(dst, a []float32, lda int, trans bool, rows, kc int) {
	if trans || rows < 12 || kc == 0 {
		packAPanelGo(dst, a, lda, trans, rows, kc, 12)
		return
	}
	_ = a[11*lda+kc-1]
	r0, r1, r2, r3 := a[:kc], a[lda:lda+kc], a[2*lda:2*lda+kc], a[3*lda:3*lda+kc]
	r4, r5, r6, r7 := a[4*lda:4*lda+kc], a[5*lda:5*lda+kc], a[6*lda:6*lda+kc], a[7*lda:7*lda+kc]
	r8, r9, r10, r11 := a[8*lda:8*lda+kc], a[9*lda:9*lda+kc], a[10*lda:10*lda+kc], a[11*lda:11*lda+kc]
	d := dst[:12*kc]
	for p := range kc {
		o := d[p*12 : p*12+12 : p*12+12]
		o[0], o[1], o[2], o[3] = r0[p], r1[p], r2[p], r3[p]
		o[4], o[5], o[6], o[7] = r4[p], r5[p], r6[p], r7[p]
		o[8], o[9], o[10], o[11] = r8[p], r9[p], r10[p], r11[p]
	}
}
