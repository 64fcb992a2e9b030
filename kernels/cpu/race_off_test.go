//go:build !race

package cpu

// raceDetector: the tests run under the race detector (go test -race).
const raceDetector = false
