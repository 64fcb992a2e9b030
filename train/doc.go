// Package train is troupe's trainer: the configuration of a run (Config,
// checked by Validate, which changes nothing), the one step loop of every
// world (the learning-rate schedule, the sampler cursor, the evaluation,
// checkpoint and metrics cadence, the NaN check, the step metrics; its
// decisions are the pure core of package train/cadence, which the
// simulator's leader follows too), and its executors, which differ only in
// where the workers (package worker) live: actors of this process, worker
// processes (Config.Procs), or the members of an elastic generation.
//
// Run trains in this process or in worker processes; RunAgent runs one
// node of an elastic job (troupe agent), whose leader drives the pure
// protocol of package train/leader (status, form, train, verify, finish)
// over the generation's members. Failures carry their class (package
// failure): transient ones start a new generation, permanent ones end the
// job on every node. Its API is what a program that embeds training uses;
// the cores are packages of their own, for train and the simulator (package
// sim) to drive.
//
// train sits above worker, actors and elastic, and above its two cores
// (train/leader, train/cadence): it starts them, they never import it.
//
// # Words
//
// The same few words name the same things in every package, flag and
// log line:
//
//   - node: one troupe process of an elastic job (troupe agent, RunAgent),
//     named by --name. troupe train's one process is not a node.
//   - member: a node as the membership knows it (elastic.Member: its name,
//     address, devices and incarnation). A member holds a place in a world
//     or stands by.
//   - world: the members that train together, in rank order, as one
//     generation committed them (elastic.World); Run's one process or its
//     worker processes form the world of generation 0. WorldInfo reports
//     each world a job formed.
//   - generation: the number of a committed world: 1 for the first, one
//     more for each change (a join, a failure, a leave). Messages of an
//     older generation are dropped.
//   - mesh: a world's shape, PP × DP × TP ranks (package mesh): pipeline
//     stages, data-parallel replicas, tensor-parallel shards. ZeRO shards
//     optimizer state, gradients and parameters over the DP axis.
//   - rank: a place in the mesh, rank = (pp·DP + dp)·TP + tp, held by one
//     worker. A member holds one rank; a process of Run holds one or
//     more.
//   - worker: the actor that computes a rank's part of every step (package
//     worker); executor: what drives a world's workers through the step
//     loop (this package).
//   - step: one optimizer update of the whole batch (Config.Batch samples,
//     in Config.MicroBatches micro-batches and Config.Accum accumulation
//     passes).
package train
