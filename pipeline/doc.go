// Package pipeline holds the pure core of pipeline parallelism: cutting a
// model into P contiguous stages, the schedules that say what each stage
// does in what order (GPipe and 1F1B, as data), a per-stage Cursor that an
// executor steps through a schedule as messages arrive, a discrete-event
// simulator that plays a schedule under given costs, and the accounting of
// a timeline (busy, communication and idle time, the bubble fraction, peak
// activations alive) that is the same for a simulated run and a real one
// (Recorder).
//
// Nothing here starts a goroutine, reads a clock (Recorder takes its times
// from the caller) or does I/O beyond writing to an io.Writer. The Stage
// actors and the executor that run schedules with real layers, messages and
// optimizer steps are the shell and live above (in actors and train);
// docs/PIPELINE.md describes the contract between the two.
//
// pipeline imports nn (to count a model's parameters per layer) and trace;
// it must not import actors, elastic or train.
package pipeline
