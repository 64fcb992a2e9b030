// Package ddp is the pure core of data parallelism, PyTorch DDP's Reducer
// without the threads: which gradients form which bucket, when a bucket is
// ready to be all-reduced while the backward pass goes on, how much of the
// communication the backward pass hid, and the replica checksum. The Worker
// actor (package actors) is its shell.
//
// ddp imports nn and collective; never actors or above.
package ddp
