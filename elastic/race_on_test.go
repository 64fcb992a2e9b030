//go:build race

package elastic

// raceEnabled: protoactor's remote.Start sets gRPC's global logger and its
// endpoint manager stops without a lock, so two remote actor systems in
// one test process are a data race inside protoactor-go (not in troupe).
// Tests that need two remote systems skip under -race; the other shell
// tests share one local system.
const raceEnabled = true
