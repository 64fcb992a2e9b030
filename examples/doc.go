// Package examples holds runnable programs that use troupe as a library:
//
//   - quickstart: train the MLP on MNIST in a few lines of Go.
//   - service: an HTTP service that trains a model in the background, with
//     live progress at /progress and a graceful stop that keeps the weights.
//   - elastic-service: an HTTP service that is a node of an elastic job
//     (train.RunAgent in-process): membership and progress at /status, a
//     graceful leave on SIGTERM.
//   - elastic: an elastic job on loopback that grows and shrinks on a
//     schedule (troupe agent processes), printing each world.
//   - chaos: an elastic job whose agents are killed and restarted at random,
//     bounded in count and time, checked for bit-identical replicas at the end.
package examples
