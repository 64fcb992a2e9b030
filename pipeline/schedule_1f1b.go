package pipeline

// oneFOneBStage appends the 1F1B list for one stage s of P: warm-up
// forwards (P−s−1 of them, fewer if M is smaller) fill the pipeline below
// s; then each steady step runs the forward of micro-batch w+i and the
// backward of micro-batch i; the cool-down runs the last w backwards.
//
// Stage s therefore holds at most w+1 = min(P−s, M) micro-batches'
// activations: the warm-up ones plus the one forwarded in a steady step
// before its oldest is freed by the backward that follows. The last stage
// (w = 0) runs each backward right after its forward.
func oneFOneBStage(b *stageBuilder, P, M int) {
	w := min(P-b.stage-1, M)
	for m := range w {
		b.forward(m)
	}
	for i := range M - w {
		b.forward(w + i)
		b.backward(i)
	}
	for m := M - w; m < M; m++ {
		b.backward(m)
	}
}
