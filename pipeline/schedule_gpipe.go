package pipeline

// gpipeStage appends GPipe's list for one stage: all M forwards, then all M
// backwards, both in micro-batch order (as PyTorch's ScheduleGPipe). The
// backward order does not change the bubble with equal stages, and
// micro-batch order makes the gradient sums add up in the same order as
// 1F1B's and as sequential accumulation.
func gpipeStage(b *stageBuilder, M int) {
	for m := range M {
		b.forward(m)
	}
	for m := range M {
		b.backward(m)
	}
}
