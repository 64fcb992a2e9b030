// Package mesh lays a training world out as a grid of named axes: pp
// (pipeline stages), dp (data-parallel replicas; ZeRO shards along it) and
// tp (tensor-parallel shards, of size 1 until tensor parallelism lands).
// A rank has coordinates on every axis, and the ranks that differ from it
// along one axis only form that axis's collective group: the data-parallel
// group that sums a stage's gradients, the pipeline through which one
// replica's activations flow.
//
// Every world is a mesh: one worker, the worker actors of one process, the
// worker processes of troupe train --procs, the agents of an elastic
// generation. Layouts (who holds which stage) are planned in mesh
// coordinates, by pure code.
//
// mesh imports nothing of troupe but failure.
package mesh
