// Package collective holds troupe's collectives as pure schedules: ring
// reduce-scatter, all-gather and all-reduce (sum, average and max), a
// recursive-doubling all-reduce for small buffers (up to
// Config.SmallAllReduceBytes, 64 KiB by default, where its log₂P steps beat
// the ring's 2(P−1)), a pipelined ring broadcast, a barrier, and a naive
// gather-to-root-then-broadcast all-reduce kept as a baseline.
//
// The protocol lives in Core, a per-rank state machine in the style of
// etcd's raft: it has no goroutines, no clock and no I/O. Its inputs are
// "start this operation", "this message arrived", "this peer is lost" and
// "it is now t"; its outputs (Core.Ready) are the messages to send and the
// operations that completed. Engine binds the cores of one rank's groups to
// a transport and to the Handles callers wait on; a shell (the goroutine
// loop of MemNetwork here, the Comm actor in package actors) owns an Engine
// and feeds it from one goroutine.
//
// A hierarchical all-reduce, for groups spanning several hosts with several
// ranks on each (OnHosts tells a communicator its ranks' hosts), is no
// schedule of its own: a communicator composes it from ring operations in
// groups of the hosts' ranks (hier.go).
//
// The package also holds the Communicator API the trainer calls, bucket
// assignment (a pure function), and MemNetwork, an in-memory transport with
// hooks that drop, delay, duplicate, reorder and partition messages and kill
// ranks.
//
// collective imports nothing from protoactor or from package actors: the
// actor shell lives above it.
package collective
