//go:build race

package train

// raceDetector: the tests run under the race detector (go test -race).
const raceDetector = true
