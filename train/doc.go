// Package train is troupe's Trainer: the configuration of a run, the step
// loop (sampling, learning-rate schedule, gradient accumulation, evaluation,
// metrics, progress), and the composition of workers into a world.
//
// train sits above actors and elastic: it starts them, they never import it.
package train
