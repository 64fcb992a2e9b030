//go:build !amd64 || noasm

package cpu

// spinPause: no hint where there is no assembly.
func spinPause() {}
