package cpu

// Temporary: replaced by the real kernels (ops_*.go). Delete this file then.

import "github.com/troupe-ml/troupe/kernels"

func (be *Backend) Axpy(alpha float32, x, y kernels.Buffer) { panic("pending") }
func (be *Backend) Scale(x kernels.Buffer, alpha float32)   { panic("pending") }
func (be *Backend) Add(dst, a, b kernels.Buffer)            { panic("pending") }
func (be *Backend) AddBias(y, bias kernels.Buffer)          { panic("pending") }
func (be *Backend) SumRows(dst, x kernels.Buffer)           { panic("pending") }
func (be *Backend) Sum(x kernels.Buffer) float64            { panic("pending") }
func (be *Backend) SumSquares(x kernels.Buffer) float64     { panic("pending") }
func (be *Backend) ReLU(y, x kernels.Buffer)                { panic("pending") }
func (be *Backend) ReLUBackward(dx, dy, x kernels.Buffer)   { panic("pending") }
func (be *Backend) GELU(y, x kernels.Buffer)                { panic("pending") }
func (be *Backend) GELUBackward(dx, dy, x kernels.Buffer)   { panic("pending") }
func (be *Backend) LayerNorm(y, mean, rstd, x, gamma, beta kernels.Buffer, eps float32) {
	panic("pending")
}
func (be *Backend) LayerNormBackward(dx, dgamma, dbeta, dy, x, mean, rstd, gamma kernels.Buffer) {
	panic("pending")
}
func (be *Backend) Embedding(y, table kernels.Buffer, ids kernels.Index)           { panic("pending") }
func (be *Backend) EmbeddingBackward(dtable, dy kernels.Buffer, ids kernels.Index) { panic("pending") }
func (be *Backend) SoftmaxCrossEntropy(losses, dlogits, logits kernels.Buffer, targets kernels.Index, gradScale float32) {
	panic("pending")
}
func (be *Backend) ArgmaxCorrect(logits kernels.Buffer, targets kernels.Index) int { panic("pending") }
func (be *Backend) CausalSoftmax(y, x kernels.Buffer, t int, scale float32)        { panic("pending") }
func (be *Backend) SoftmaxBackward(dx, dy, y kernels.Buffer, cols int, scale float32) {
	panic("pending")
}
func (be *Backend) Transpose(dst, src kernels.Buffer, shape []int, perm []int) { panic("pending") }
func (be *Backend) SGDStep(p, g, buf kernels.Buffer, h kernels.SGDHyper, first bool) {
	panic("pending")
}
func (be *Backend) AdamWStep(p, g, m, v kernels.Buffer, h kernels.AdamWHyper, t int) {
	panic("pending")
}
