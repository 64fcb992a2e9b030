// Package train is troupe's trainer: the configuration of a run (Config,
// checked by Validate, which changes nothing), the one step loop of every
// world (the learning-rate schedule, the sampler cursor, the evaluation,
// checkpoint and metrics cadence, the NaN check, the step metrics), and
// its executors, which differ only in where the workers (package worker)
// live: actors of this process, worker processes (Config.Procs), or the
// members of an elastic generation.
//
// Run trains in this process or in worker processes; RunAgent runs one
// node of an elastic job (troupe agent), whose leader drives the pure
// protocol of leader.go (status, form, train, verify, finish) over the
// generation's members. Failures carry their class (package failure):
// transient ones start a new generation, permanent ones end the job on
// every node.
//
// train sits above worker, actors and elastic: it starts them, they never
// import it.
package train
