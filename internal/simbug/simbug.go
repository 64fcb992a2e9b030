// Package simbug holds switches that bring back bugs fixed in the past, so
// that the simulator's tests can show it catches them. Only tests set
// them; every switch is off in troupe.
package simbug

// NoPrepare makes the rendezvous start every new ballot at its propose
// phase, without the prepare round that learns what a quorum may have
// accepted: the propose/ack/commit protocol that committed two worlds for
// one generation.
var NoPrepare bool

// NoCommitProof makes the rendezvous ignore the proof of a commit that a
// call of the committed generation carries (Core.Learn): a member whose
// commit messages were lost with their proposer waits for a quorum of the
// world before, which may be gone, although a majority of the committed
// world is alive.
var NoCommitProof bool
