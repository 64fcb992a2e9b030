//go:build !race

package sim

// raceDetector: the tests run under the race detector (see race_on_test.go).
const raceDetector = false
