// Package nnref is a plain float64 reference implementation of troupe's
// layers and models: naive loops, explicit backward passes checked against
// central finite differences. Tests hold the float32 kernels-based models of
// package nn against it. It is slow on purpose; never use it to train.
package nnref
