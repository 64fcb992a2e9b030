// Package kernels defines the Backend interface every device implements, the
// registry that names them, and (in kerneltest) the conformance suite each
// backend must pass against a float64 reference.
//
// kernels is the bottom layer: it imports nothing else from troupe.
package kernels
