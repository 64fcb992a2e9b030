//go:build cuda

package cuda

import (
	"testing"

	"go.uber.org/goleak"
)

// TestMain checks that every backend a test opened was closed: its loop
// goroutine must be gone.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m)
}
