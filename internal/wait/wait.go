// Package wait is the one way tests wait for something another process
// or goroutine does: check a condition at a fixed period until it holds
// or a deadline passes. The deadline only bounds the wait (a dead peer
// fails the test instead of hanging it); no test asserts how long a wait
// took.
package wait

import "time"

// Poll is the period between two checks.
const Poll = 20 * time.Millisecond

// Until checks cond now and every Poll until it holds (true) or timeout
// has passed (false: the caller fails its test, saying what it waited
// for).
func Until(timeout time.Duration, cond func() bool) bool {
	deadline := time.Now().Add(timeout)
	for !cond() {
		if !time.Now().Before(deadline) {
			return false
		}
		time.Sleep(Poll)
	}
	return true
}
