// Package cadence is the step loop's policy as a pure core (Cadence):
// which step to start while others are in flight, what follows a
// completed step (an evaluation, a checkpoint, the end of the run) and what
// ends a run (a failed or non-finite step, a cancellation, a superseded
// generation, the last step).
//
// Two shells drive it: train's step loop, which runs the steps on an
// executor, and the simulator's leader (package sim), which runs them on
// simulated members. Neither decides anything of this on its own, so the
// simulator checks the cadence the trainer follows.
//
// cadence holds no executor, clock or I/O and imports nothing of troupe
// but failure; it must not import train (which imports it).
package cadence
