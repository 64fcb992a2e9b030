// Package failure is troupe's vocabulary for what goes wrong in a job, so
// that an error keeps its meaning from the rank that saw it to the node
// that decides what to do about it.
//
// Every sentinel error of troupe's packages carries a Code. A Code is
// transient (a member lost, a silent peer, a timeout, an aborted or
// cancelled operation, a crashed worker: the world can go on, in a new
// generation without what failed) or permanent (a configuration that cannot
// work, an output that cannot be written, bad data, an unreadable
// checkpoint, diverged replicas, state that nobody holds: the job ends on
// every node with a non-zero exit naming the cause). An error that carries
// no Code is permanent: retrying what nobody classified would turn a bug
// into an endless loop of generations.
//
// Errors cross the wire as a Code and a message (Encode, Decode); the
// decoded error matches every sentinel of its Code under errors.Is, so the
// leader of an elastic job classifies a member's failure as if it had
// happened locally.
//
// failure imports nothing of troupe: every package may use it.
package failure
