//go:build !race

package main

// raceDetector: the tests run under the race detector (go test -race).
const raceDetector = false
