package train

import (
	"fmt"
	"io"

	"github.com/schollz/progressbar/v3"
)

// progress is the terminal progress bar: step, loss, throughput and ETA.
type progress struct {
	bar *progressbar.ProgressBar
}

func newProgress(w io.Writer, steps int) *progress {
	return &progress{bar: progressbar.NewOptions(steps,
		progressbar.OptionSetWriter(w),
		progressbar.OptionSetDescription("train"),
		progressbar.OptionShowCount(),
		progressbar.OptionSetPredictTime(true),
		progressbar.OptionSetWidth(30),
		progressbar.OptionThrottle(0),
		progressbar.OptionClearOnFinish(),
	)}
}

func (p *progress) update(step int, loss, samplesPerS, tokensPerS float64) {
	desc := fmt.Sprintf("loss %.4f  %.0f samples/s", loss, samplesPerS)
	if tokensPerS > 0 {
		desc = fmt.Sprintf("loss %.4f  %.0f tok/s", loss, tokensPerS)
	}
	p.bar.Describe(desc)
	_ = p.bar.Set(step)
}

func (p *progress) finish() { _ = p.bar.Finish() }
