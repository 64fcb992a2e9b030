// Package leader is the elastic trainer protocol of one node as a pure
// state machine (Core): every committed world goes in; on the world's
// leader the core asks the members what they hold (status), lays the
// generation out on a mesh (Layout: who holds which stage and shard, and
// where each slot's state comes from: the seed, a surviving replica, a
// checkpoint), tells every member its place (form), has its shell run the
// step loop (TrainOrder), compares the replicas' checksums at the end
// (verify) and tells every member that the job ended (finish). Failures
// are classified: a transient one waits for the next generation, a
// permanent one ends the job on every member.
//
// Two shells drive it: train's agent (troupe agent, train.RunAgent), which
// sends its calls to the members' workers and runs the step loop on them,
// and the simulator (package sim), which does the same over a simulated
// network and clock. The core has no goroutines, clock or I/O; time comes
// in by Tick.
//
// Its errors are train's (train re-exports them: train.ErrStageLost is
// ErrStageLost), and so is DivergedError, which executors report too.
//
// leader sits below train and above the shells: it imports elastic, worker
// (its holdings, sources and wire messages), mesh, data and failure, never
// train or sim.
package leader
