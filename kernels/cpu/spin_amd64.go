//go:build amd64 && !noasm

package cpu

// spinPause tells the core this thread is spinning (x86 PAUSE).
//
//go:noescape
func spinPause()
