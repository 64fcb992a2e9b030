package data

import (
	"testing"

	"go.uber.org/goleak"
)

// Prepare tokenizes in goroutines: every one must be gone when it returns.
func TestMain(m *testing.M) { goleak.VerifyTestMain(m) }
