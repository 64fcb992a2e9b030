// Package optim holds the optimizers (SGD with momentum, AdamW, with the
// exact update rules of torch.optim), learning-rate schedules (warm-up,
// cosine decay, the linear-scaling rule) and gradient clipping by global
// norm. Optimizers update a whole nn.ParamSet with one kernel call over its
// flat buffers.
//
// optim must not import actors or anything above nn.
package optim
