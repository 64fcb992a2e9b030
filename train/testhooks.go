package train

import (
	"fmt"
	"os"
	"strconv"
	"strings"
	"time"

	"github.com/troupe-ml/troupe/worker"
)

// testHooks, when set, gives every job built in this process a slow
// worker and an overflowing gradient for tests of straggler detection and
// of the loss scaler. troupe's own builds leave it nil: the package's
// tests set it (hooks_test.go), and so does a binary built with
// -tags troupetesthooks (the one the e2e tests run), reading
// envStraggler and envOverflow, which worker processes and agents the
// test starts inherit. No environment variable changes a run otherwise.
var testHooks func() (*worker.Straggler, *worker.Overflow, error)

// envTestHooks reads envStraggler and envOverflow.
func envTestHooks() (*worker.Straggler, *worker.Overflow, error) {
	s, err := testStraggler()
	if err != nil {
		return nil, nil, err
	}
	o, err := testOverflow()
	if err != nil {
		return nil, nil, err
	}
	return s, o, nil
}

// envOverflow names a test's overflowing gradient: RANK:STEP
// (worker.Overflow: the worker at mesh rank RANK finds an inf in its
// gradients at 1-based step STEP, which the fp16 loss scaler skips).
const envOverflow = "TROUPE_TEST_OVERFLOW"

// testOverflow reads envOverflow (nil when unset).
func testOverflow() (*worker.Overflow, error) {
	v := os.Getenv(envOverflow)
	if v == "" {
		return nil, nil
	}
	r, s, ok := strings.Cut(v, ":")
	rank, err := strconv.Atoi(r)
	step, serr := strconv.Atoi(s)
	if !ok || err != nil || serr != nil || rank < 0 || step < 1 {
		return nil, fmt.Errorf("%w: %s=%q: want RANK:STEP, e.g. 1:3", ErrConfig, envOverflow, v)
	}
	return &worker.Overflow{Rank: rank, Step: step}, nil
}

// envStraggler names a test's slow worker: RANK:DELAY (worker.Straggler),
// inherited by worker processes and read by agents alike.
const envStraggler = "TROUPE_TEST_STRAGGLER"

// testStraggler reads envStraggler (nil when unset).
func testStraggler() (*worker.Straggler, error) {
	v := os.Getenv(envStraggler)
	if v == "" {
		return nil, nil
	}
	r, d, ok := strings.Cut(v, ":")
	rank, err := strconv.Atoi(r)
	delay, derr := time.ParseDuration(d)
	if !ok || err != nil || derr != nil || rank < 0 || delay <= 0 {
		return nil, fmt.Errorf("%w: %s=%q: want RANK:DELAY, e.g. 1:50ms", ErrConfig, envStraggler, v)
	}
	return &worker.Straggler{Rank: rank, Delay: delay}, nil
}
