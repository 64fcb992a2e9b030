// Package nn holds troupe's models: parameters, layers with explicit forward
// and backward passes over a kernels.Backend, the MLP classifier and the
// char/byte GPT, and the softmax cross-entropy loss.
//
// Parameter names and layouts follow PyTorch's state_dict (a Linear's weight
// is [out, in]), so weights move between troupe and PyTorch through
// safetensors with no conversion.
//
// Memory model: a model's parameters live in one flat buffer and their
// gradients in another, each parameter a view, so that gradient buckets are
// contiguous ranges for the all-reduce and an optimizer can update every
// parameter in one kernel call. Activations come from a Pool and are held by
// a Tape (one per micro-batch in flight) until the backward pass releases
// them, so the pool's high-water mark is the activation memory.
//
// nn must not import actors, elastic or anything above them.
package nn
