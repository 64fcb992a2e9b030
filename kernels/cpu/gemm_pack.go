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
