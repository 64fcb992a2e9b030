package models_test

import (
	"testing"

	"go.uber.org/goleak"
)

// protoactor starts a timer goroutine per burst of dead letters (messages
// to actors that stopped, routine while a world shuts down); it ends after
// the throttle interval on its own. Everything else must be stopped.
func TestMain(m *testing.M) {
	goleak.VerifyTestMain(m, goleak.IgnoreTopFunction("github.com/asynkron/protoactor-go/actor.NewDeadLetter.NewThrottle.func4.1"))
}
