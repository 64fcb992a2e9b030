//go:build race

package actors

// raceEnabled: protoactor's remote.Start sets gRPC's global logger, which
// races with the gRPC server of another remote system in the same process.
// One process holds one remote system in production; under the race
// detector the tests that put several in one process are skipped, and the
// multi-process test and the data plane tests cover those paths instead.
const raceEnabled = true
