// Package worker is the one worker of troupe: the implementation of a
// data-parallel replica, a pipeline stage, or both (a stage of one of
// several replicas), used alike by the worker actors of one process, the
// worker processes of troupe train --procs and the agents of an elastic
// job.
//
// A Worker holds a model part (the units of one pipeline stage, all of
// them without pipelining), its optimizer and its backend. Form places it
// in a generation of a mesh (package mesh) and gives it its stage's state:
// from the seed, from a surviving replica, or from a checkpoint; the plan
// of what a worker does to join (roll back a torn step, drop state that is
// ahead, rebuild another stage, transfer state) is a pure function of what
// it holds (Holding.Plan), tested without a world. Step runs one optimizer
// step: the stage's schedule over the micro-batches (without pipelining,
// a one-stage schedule: gradient accumulation), the gradient buckets
// all-reduced over the data-parallel group while the last backward pass
// goes on (as PyTorch DDP does), the tied embedding's gradient summed
// between the first and last stage, the global norm clipped, the update.
// On an error nothing was applied.
//
// A step is the same sequence on every worker; how each parallel axis
// takes part in it is chosen once, when the worker is formed, as phases
// (phases.go): the gradients' reduction over the replicas (none, the
// bucketed all-reduce, ZeRO's reduce-scatters, local SGD's and DiLoCo's
// rounds), the gradient and weight memory (replicated, or sharded by
// ZeRO-1, 2 or 3), and the tensor-parallel group. Which phases a worker
// gets is a plain function of its mesh and spec (planPhases); an axis it
// does not use gets a phase that does nothing, so the step does not ask
// which are on.
//
// The worker actor (actor.go) is the shell: it turns wire messages
// (workerpb) into calls, runs one at a time, stops on a panic instead of
// going on with half-updated state, and answers every failure with its
// code (package failure).
//
// worker sits above nn, data, collective, pipeline, checkpoint, mesh and
// actors (the actor system and the collectives' transport); it imports
// nothing of elastic, train or cmd.
package worker
