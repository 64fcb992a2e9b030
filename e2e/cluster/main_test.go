//go:build long

package cluster

import (
	"testing"
	"time"

	"github.com/troupe-ml/troupe/e2e/e2etest"
)

// troupeBin is the troupe binary built once for the whole package.
var troupeBin string

func TestMain(m *testing.M) { e2etest.Main(m, &troupeBin) }

// run runs a command with a deadline (e2etest.Run).
func run(t *testing.T, timeout time.Duration, name string, args ...string) (string, string, error) {
	t.Helper()
	return e2etest.Run(t, timeout, name, args...)
}

// troupe runs the troupe binary and fails the test on a non-zero exit.
func troupe(t *testing.T, timeout time.Duration, args ...string) string {
	t.Helper()
	return e2etest.Troupe(t, timeout, troupeBin, args...)
}
