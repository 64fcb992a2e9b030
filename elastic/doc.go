// Package elastic is troupe's membership and rendezvous layer: which nodes
// form the training world, in which rank order, at which generation.
//
// One elastic node (troupe agent, one OS process) is a memberlist member
// plus a membership actor on the node's protoactor system:
//
//   - memberlist (gossip, SWIM failure detection) carries each process
//     start's metadata: its stable node name, a unique member ID, its
//     actor and data-plane addresses, devices and troupe protocol version
//     (meta.go). Gossip is encrypted with the cluster key (key.go); a node
//     without the key, with another protocol version, or sending garbage
//     is refused and logged, and changes nothing. Failure detection is
//     tuned by Timings (FastTimings: a killed or hung member is declared
//     dead in about a second).
//   - The rendezvous core (core.go) is pure: no goroutines, clock or I/O.
//     Membership changes, peers' messages, ticks and the trainer's
//     Hold/Release/Request go in; messages to send and events come out
//     (Ready). It decides each next world by single-decree Paxos among the
//     members of the current one: a strict majority of them must accept
//     (QuorumMajority), so a partitioned minority never forms a world of
//     its own; it waits. The stable leader (the lowest live member, which
//     proposed the current world) needs one round trip: propose, ack,
//     commit.
//   - The membership actor (actor.go) owns the core; memberlist's callbacks
//     only forward to it (they hold memberlist's locks). Rendezvous
//     messages travel between the membership actors through protoactor
//     (remote over gRPC between processes) as one authenticated envelope
//     type (elasticpb, wire.go).
//
// The trainer's side (package train, troupe agent) is Node: Start joins,
// Worlds delivers committed worlds, Events every transition with its
// reason and timings, Hold/Release bracket each training step so that a
// world changes only at a step boundary, Request asks for a new generation
// after a collective failed, Leave and Close stop. docs/ELASTIC.md has the
// protocol, the guarantees and the measured figures.
//
// elastic imports actors (the actor system) and nothing above it: not
// train, not cmd.
package elastic
