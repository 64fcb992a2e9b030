package collective

// addGo adds src into dst element by element (len(src) ≥ len(dst)),
// unrolled by 8 so that the compiler drops the bounds checks and keeps
// several independent adds in flight.
func addGo(dst, src []float32) {
	n := len(dst)
	src = src[:n]
	i := 0
	for ; i+8 <= n; i += 8 {
		d := dst[i : i+8 : i+8]
		s := src[i : i+8 : i+8]
		d[0] += s[0]
		d[1] += s[1]
		d[2] += s[2]
		d[3] += s[3]
		d[4] += s[4]
		d[5] += s[5]
		d[6] += s[6]
		d[7] += s[7]
	}
	for ; i < n; i++ {
		dst[i] += src[i]
	}
}

// divide divides every element of x by d: the average is the sum divided by
// P, rounded once (a multiplication by 1/P would round twice).
func divide(x []float32, d float32) {
	for i := range x {
		x[i] /= d
	}
}

// combine folds src into dst with op: a sum for Sum and Avg, the larger
// value for Max.
func combine(op ReduceOp, dst, src []float32) {
	if op.Base() != Max {
		addTo(dst, src)
		return
	}
	src = src[:len(dst)]
	for i, v := range src {
		dst[i] = max(dst[i], v)
	}
}
