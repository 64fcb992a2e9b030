// Package kerneltest is the conformance suite every kernels.Backend must
// pass: Run checks each Backend method against a plain float64 reference
// written here, on seeded random inputs of awkward shapes, with a stated
// tolerance per kernel. It talks to the backend only through the
// kernels.Backend interface (Alloc, Upload, Download, …), so the same suite
// runs against the CPU backend and a GPU one.
//
// Bench measures a few representative kernels at training-like sizes.
//
// kerneltest imports only kernels from troupe; it must never import a
// backend, which would make the suite depend on what it judges.
package kerneltest
