// Package actors is troupe's protoactor-go shell: the actor system
// bootstrap (local, or remote over gRPC), the wire messages (actorspb), and
// the actors that drive the pure cores of the layers below.
//
// The Comm actor owns one rank's collective.Engine: its mailbox serialises
// the caller's requests, arriving chunks, failure signals (watch Terminated,
// EndpointTerminatedEvent, a data plane connection reset) and clock ticks,
// and it performs the sends the engine asks for. Chunks travel by the
// fastest path (DESIGN.md, "the two planes"): between Comm actors of one
// process by pointer; between processes on a framed TCP stream between the
// two actors (DataPlane), or, for comparison, as protobuf bytes through
// protoactor remote. Control messages (hello, abort) always go through
// protoactor.
//
// actors sits above collective, pipeline and checkpoint, and below elastic
// and train; it imports nothing above it.
package actors
