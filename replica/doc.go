// Package replica is one model replica with its optimizer state, its
// kernels backend and its activation pool: what a Worker actor holds and
// drives. It computes gradients for a range of rows of a global batch and
// applies optimizer updates; it knows nothing of other replicas, so the
// data-parallel, pipeline and single-worker trainers all use it unchanged.
//
// replica imports kernels, nn, nn/optim and data, never actors or above.
package replica
