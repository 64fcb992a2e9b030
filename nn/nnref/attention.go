package nnref

import "math"

// AttentionCache keeps what the attention backward pass needs.
type AttentionCache struct {
	qkv []float64 // [B·T, 3C]
	p   []float64 // [B, H, T, T] softmax probabilities
	y   []float64 // [B·T, C] before the output projection
}

// Attention is causal multi-head self-attention on x [B·T, C] with the fused
// projection wqkv [3C, C], bqkv [3C] and output projection wp [C, C], bp [C].
func Attention(x, wqkv, bqkv, wp, bp []float64, b, t, c, h int) ([]float64, *AttentionCache) {
	hd := c / h
	qkv := Linear(x, wqkv, bqkv, b*t, c, 3*c)
	p := make([]float64, b*h*t*t)
	y := make([]float64, b*t*c)
	scale := 1 / math.Sqrt(float64(hd))
	at := func(bb, tt, which, hh, d int) float64 { return qkv[(bb*t+tt)*3*c+which*c+hh*hd+d] }
	for bb := 0; bb < b; bb++ {
		for hh := 0; hh < h; hh++ {
			for i := 0; i < t; i++ {
				row := p[((bb*h+hh)*t+i)*t:][:t]
				mx := math.Inf(-1)
				for j := 0; j <= i; j++ {
					s := 0.0
					for d := 0; d < hd; d++ {
						s += at(bb, i, 0, hh, d) * at(bb, j, 1, hh, d)
					}
					row[j] = s * scale
					mx = math.Max(mx, row[j])
				}
				z := 0.0
				for j := 0; j <= i; j++ {
					row[j] = math.Exp(row[j] - mx)
					z += row[j]
				}
				for j := 0; j <= i; j++ {
					row[j] /= z
				}
				for d := 0; d < hd; d++ {
					s := 0.0
					for j := 0; j <= i; j++ {
						s += row[j] * at(bb, j, 2, hh, d)
					}
					y[(bb*t+i)*c+hh*hd+d] = s
				}
			}
		}
	}
	out := Linear(y, wp, bp, b*t, c, c)
	return out, &AttentionCache{qkv: qkv, p: p, y: y}
}

// AttentionBackward returns dx and the gradients of wqkv, bqkv, wp, bp.
func AttentionBackward(x, wqkv, wp []float64, cache *AttentionCache, dout []float64, b, t, c, h int) (dx, dwqkv, dbqkv, dwp, dbp []float64) {
	hd := c / h
	dy, dwp, dbp := LinearBackward(cache.y, wp, dout, b*t, c, c, true)
	dqkv := make([]float64, b*t*3*c)
	scale := 1 / math.Sqrt(float64(hd))
	idx := func(bb, tt, which, hh, d int) int { return (bb*t+tt)*3*c + which*c + hh*hd + d }
	qkv := cache.qkv
	for bb := 0; bb < b; bb++ {
		for hh := 0; hh < h; hh++ {
			for i := 0; i < t; i++ {
				row := cache.p[((bb*h+hh)*t+i)*t:][:t]
				dp := make([]float64, t)
				for j := 0; j <= i; j++ {
					for d := 0; d < hd; d++ {
						g := dy[(bb*t+i)*c+hh*hd+d]
						dp[j] += g * qkv[idx(bb, j, 2, hh, d)]
						dqkv[idx(bb, j, 2, hh, d)] += row[j] * g
					}
				}
				dot := 0.0
				for j := 0; j <= i; j++ {
					dot += dp[j] * row[j]
				}
				for j := 0; j <= i; j++ {
					ds := row[j] * (dp[j] - dot) * scale
					for d := 0; d < hd; d++ {
						dqkv[idx(bb, i, 0, hh, d)] += ds * qkv[idx(bb, j, 1, hh, d)]
						dqkv[idx(bb, j, 1, hh, d)] += ds * qkv[idx(bb, i, 0, hh, d)]
					}
				}
			}
		}
	}
	dx, dwqkv, dbqkv = LinearBackward(x, wqkv, dqkv, b*t, c, 3*c, true)
	return dx, dwqkv, dbqkv, dwp, dbp
}
