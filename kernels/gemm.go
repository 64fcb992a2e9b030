package kernels

import "fmt"

// Check reports sizes, leading dimensions, strides or buffer lengths
// (lenA, lenB, lenC elements) that do not fit a normalized GemmArgs, naming
// the offending argument. Backends panic with it: a misuse the caller can
// prevent, as an index out of range is.
func (g GemmArgs) Check(lenA, lenB, lenC int) error {
	if g.M < 0 || g.N < 0 || g.K < 0 {
		return fmt.Errorf("negative size M=%d N=%d K=%d", g.M, g.N, g.K)
	}
	rowsA, colsA := g.M, g.K
	if g.TransA {
		rowsA, colsA = g.K, g.M
	}
	rowsB, colsB := g.K, g.N
	if g.TransB {
		rowsB, colsB = g.N, g.K
	}
	if err := checkOperand("A", rowsA, colsA, g.LDA, g.StrideA, g.Batch, lenA); err != nil {
		return err
	}
	if err := checkOperand("B", rowsB, colsB, g.LDB, g.StrideB, g.Batch, lenB); err != nil {
		return err
	}
	return checkOperand("C", g.M, g.N, g.LDC, g.StrideC, g.Batch, lenC)
}

func checkOperand(name string, rows, cols, ld, stride, batch, n int) error {
	if rows == 0 || cols == 0 {
		return nil
	}
	if ld < cols {
		return fmt.Errorf("LD%s=%d is less than the %d columns of %s", name, ld, cols, name)
	}
	if batch > 1 && stride < 0 {
		return fmt.Errorf("negative Stride%s=%d", name, stride)
	}
	if need := (batch-1)*stride + (rows-1)*ld + cols; need > n {
		return fmt.Errorf("%s needs %d elements (%d×%d, LD%s=%d, batch %d, Stride%s=%d), buffer has %d",
			name, need, rows, cols, name, ld, batch, name, stride, n)
	}
	return nil
}
