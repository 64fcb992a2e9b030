//go:build !amd64 || noasm

package cpu

// asmVecImpls: no assembly kernels without amd64 (or with noasm).
func asmVecImpls() []vecImpl { return nil }
