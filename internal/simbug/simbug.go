// Package simbug holds switches that bring back bugs fixed in the past, so
// that the simulator's tests can show it catches them. Only tests set
// them; every switch is off in troupe.
package simbug

// NoPrepare makes the rendezvous start every new ballot at its propose
// phase, without the prepare round that learns what a quorum may have
// accepted: the propose/ack/commit protocol that committed two worlds for
// one generation.
var NoPrepare bool

// NoResend makes the rendezvous send each prepare, proposal and
// acknowledgement once: a lost one leaves the generation undecided while
// every member is alive.
var NoResend bool

// AnyRoot makes a worker that serves its part's state to a new generation
// send it to every rank of the generation, and a worker waiting for its
// part's state take the first that arrives: a part formed from a holder of
// another part.
var AnyRoot bool
