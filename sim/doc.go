// Package sim runs a whole elastic training job in one goroutine, on a
// virtual clock and one seeded random source, so that thousands of fault
// schedules run in minutes and any failure replays exactly from its seed
// (the practice of FoundationDB's and TigerBeetle's simulators).
//
// Every node runs troupe's pure cores as the real processes run them: the
// rendezvous core (elastic.Core) with memberlist's failure detection
// modelled on the clock, the trainer's leader core (train/leader's Core)
// and its step loop's cadence (train/cadence), the worker's form plan
// (worker.Holding.Plan), the sampler (data.Sampler) and the collective core
// (collective.Core) for the gradient all-reduce. What the shells do (send,
// wait with a timeout, run a step) is done here by events on the clock
// instead of goroutines and sockets, and the model is a small multi-layer
// perceptron with hand-written gradients, so that a simulated step costs
// microseconds. With Config.PP pipeline stages and Config.TP
// tensor-parallel shards each rank holds one part of the model (a stage's
// shard, partIndex): a replica's step is computed once from its parts (the
// activations between them are not simulated), each part's gradient is
// reduced over the part's data-parallel group, and a new generation takes
// each part from a holder of that part, or from a checkpoint written part
// by part and committed once, or ends with the leader core's lost-stage
// error.
//
// Faults come from the seed: crash and restart, hang and resume, message
// drop, delay, duplication and reordering, partition and heal, join and
// graceful leave. Invariants are checked after every event and at the end
// (see Violation). Layering: sim sits beside cmd; of the trainer it
// imports only the pure cores (train/leader, train/cadence), never train.
package sim
