// Package sim runs a whole elastic training job in one goroutine, on a
// virtual clock and one seeded random source, so that thousands of fault
// schedules run in minutes and any failure replays exactly from its seed
// (the practice of FoundationDB's and TigerBeetle's simulators).
//
// Every node runs troupe's pure cores as the real processes run them: the
// rendezvous core (elastic.Core) with memberlist's failure detection
// modelled on the clock, the trainer's leader core (train.LeaderCore), the
// worker's form plan (worker.Holding.Plan), the sampler (data.Sampler) and
// the collective core (collective.Core) for the gradient all-reduce. What
// the shells do (send, wait with a timeout, run a step) is done here by
// events on the clock instead of goroutines and sockets, and the model is a
// small multi-layer perceptron with hand-written gradients, so that a
// simulated step costs microseconds.
//
// Faults come from the seed: crash and restart, hang and resume, message
// drop, delay, duplication and reordering, partition and heal, join and
// graceful leave. Invariants are checked after every event and at the end
// (see Violation). Layering: sim sits beside cmd, above train.
package sim
