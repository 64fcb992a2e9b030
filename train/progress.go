package train

import (
	"fmt"
	"io"
	"os"
	"strings"
	"sync"

	"github.com/schollz/progressbar/v3"
	"golang.org/x/term"
)

// Terminal is a terminal that log lines and the progress bar share. A
// write (a log line) while the bar is shown clears the bar's line, writes
// the log line and draws the bar again below it, so that the two never
// run into one line and the bar stays last. Give the same Terminal to the
// logger and to Options.Progress. Safe for concurrent use.
type Terminal struct {
	mu  sync.Mutex
	w   io.Writer
	fd  int    // w's file descriptor when it is a terminal, else -1
	bar string // the bar's line while one is shown, "" when none
	// open is true while the last write did not end its line: the bar is
	// drawn again once the line is complete.
	open bool
}

// clearLine returns the cursor to the start of the line and erases it.
const clearLine = "\r\033[K"

// NewTerminal returns a Terminal that writes to w.
func NewTerminal(w io.Writer) *Terminal {
	t := &Terminal{w: w, fd: -1}
	if f, ok := w.(*os.File); ok && term.IsTerminal(int(f.Fd())) {
		t.fd = int(f.Fd())
	}
	return t
}

// Write writes p above the bar.
func (t *Terminal) Write(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	t.mu.Lock()
	defer t.mu.Unlock()
	var b strings.Builder
	if t.bar != "" && !t.open {
		b.WriteString(clearLine)
	}
	b.Write(p)
	t.open = p[len(p)-1] != '\n'
	if t.bar != "" && !t.open {
		b.WriteString(t.bar)
	}
	if _, err := io.WriteString(t.w, b.String()); err != nil {
		return 0, err
	}
	return len(p), nil
}

// draw shows line as the bar, in place of the one shown. Its write errors
// are dropped: a bar that cannot be drawn is no reason to stop training.
func (t *Terminal) draw(line string) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.fd >= 0 {
		// A line wider than the terminal would wrap, and clearing it would
		// erase its last row only.
		if w, _, err := term.GetSize(t.fd); err == nil && w > 1 {
			if r := []rune(line); len(r) >= w {
				line = string(r[:w-1])
			}
		}
	}
	t.bar = line
	if !t.open {
		_, _ = io.WriteString(t.w, clearLine+line)
	}
}

// end leaves the bar as last drawn on a line of its own; what is written
// afterwards goes below it.
func (t *Terminal) end() {
	t.mu.Lock()
	defer t.mu.Unlock()
	if t.bar != "" && !t.open {
		_, _ = io.WriteString(t.w, "\n")
	}
	t.bar = ""
}

// progress is the terminal progress bar: step, loss, throughput and ETA.
// progressbar formats it; the Terminal draws it.
type progress struct {
	bar  *progressbar.ProgressBar
	term *Terminal
}

// newProgress draws a bar of steps on w: w's own Terminal when it is one
// (the logger's writes then go above the bar), else a Terminal of its own.
func newProgress(w io.Writer, steps int) *progress {
	t, ok := w.(*Terminal)
	if !ok {
		t = NewTerminal(w)
	}
	return &progress{term: t, bar: progressbar.NewOptions(steps,
		progressbar.OptionSetWriter(io.Discard),
		progressbar.OptionShowCount(),
		progressbar.OptionSetPredictTime(true),
		progressbar.OptionSetWidth(30),
		progressbar.OptionThrottle(0),
		// The count before the loss: on a narrow terminal the line is cut
		// from its end.
		progressbar.OptionShowDescriptionAtLineEnd(),
	)}
}

// update draws the bar at step (1-based: the steps done), so that the
// last step shows steps/steps.
func (p *progress) update(step int, loss, samplesPerS, tokensPerS float64) {
	desc := fmt.Sprintf("loss %.4f  %.0f samples/s", loss, samplesPerS)
	if tokensPerS > 0 {
		desc = fmt.Sprintf("loss %.4f  %.0f tok/s", loss, tokensPerS)
	}
	p.bar.Describe(desc)
	_ = p.bar.Set(step)
	p.term.draw(strings.TrimSpace(p.bar.String()))
}

// finish leaves the bar at the last step drawn (steps/steps after a whole
// run) on its own line.
func (p *progress) finish() { p.term.end() }
