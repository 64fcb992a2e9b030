//go:build race

package sim

// raceDetector: the tests run under the race detector (go test -race). The
// simulator steps every member's core in one goroutine, so the detector
// has little more to find in the 200 seeds of each ZeRO and model-in-parts
// sweep than in their -short 40, which they run under it (the detector
// makes the two sweeps take over three minutes on 2 cores).
const raceDetector = true
