// Package e2e holds troupe's end-to-end tests: the real troupe binary,
// real OS processes on loopback, real kills, and PyTorch (Debian's
// python3-torch) as the reference where a test says so. Every test is
// bounded in time and cleans up its processes.
package e2e
