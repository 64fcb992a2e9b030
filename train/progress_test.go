package train

import (
	"bytes"
	"fmt"
	"os"
	"strings"
	"testing"
)

// screen is a fake terminal: it keeps what a terminal would show for the
// bytes written to it, honouring the carriage return, the line feed (as a
// terminal's output does by default: to the start of the next line) and
// ESC[K (erase to the end of the line).
type screen struct {
	lines []string
	row   int
	col   int
}

func (s *screen) Write(p []byte) (int, error) {
	in := []rune(string(p))
	for i := 0; i < len(in); i++ {
		for len(s.lines) <= s.row {
			s.lines = append(s.lines, "")
		}
		line := []rune(s.lines[s.row])
		switch r := in[i]; {
		case r == '\r':
			s.col = 0
		case r == '\n':
			s.row, s.col = s.row+1, 0
		case r == '\033' && i+2 < len(in) && in[i+1] == '[' && in[i+2] == 'K':
			s.lines[s.row] = string(line[:min(s.col, len(line))])
			i += 2
		case r == '\033':
			return 0, fmt.Errorf("screen: an escape sequence it does not know at %q", string(in[i:]))
		default:
			for len(line) <= s.col {
				line = append(line, ' ')
			}
			line[s.col] = r
			s.lines[s.row], s.col = string(line), s.col+1
		}
	}
	return len(p), nil
}

// Log lines written while the bar is shown land above it, whole, and the
// bar of a whole run ends at steps/steps on its own line.
func TestProgressLogLinesAboveTheBar(t *testing.T) {
	var s screen
	term := NewTerminal(&s)
	p := newProgress(term, 30)
	for step := 1; step <= 30; step++ {
		p.update(step, 2.5-float64(step)/100, 1000, 0)
		if step%10 == 0 {
			fmt.Fprintf(term, "log line after step %d\n", step)
		}
	}
	fmt.Fprintf(term, "a log line in two ")
	fmt.Fprintf(term, "writes\n")
	p.finish()
	fmt.Fprintln(term, "after the run")

	want := []string{"log line after step 10", "log line after step 20", "log line after step 30", "a log line in two writes"}
	got := s.lines
	if len(got) != len(want)+2 {
		t.Fatalf("the screen shows %d lines, want %d:\n%s", len(got), len(want)+2, strings.Join(got, "\n"))
	}
	for i, w := range want {
		if got[i] != w {
			t.Errorf("line %d is %q, want %q (a log line and the bar ran into one line?)", i, got[i], w)
		}
	}
	bar := got[len(want)]
	t.Logf("the bar: %s", bar)
	if !strings.Contains(bar, "(30/30") || !strings.Contains(bar, "100%") || !strings.Contains(bar, "loss 2.2000") {
		t.Errorf("the bar ends as %q, want 100%% at 30/30 with the last loss", bar)
	}
	if got[len(got)-1] != "after the run" {
		t.Errorf("the last line is %q, want the line written after the run", got[len(got)-1])
	}
}

// A run that stops early leaves the bar at the step it reached.
func TestProgressStoppedEarly(t *testing.T) {
	var s screen
	p := newProgress(&s, 30)
	for step := 1; step <= 12; step++ {
		p.update(step, 1, 100, 2000)
	}
	p.finish()
	if len(s.lines) != 1 || !strings.Contains(s.lines[0], "(12/30") || !strings.Contains(s.lines[0], "2000 tok/s") || s.row != 1 || s.col != 0 {
		t.Fatalf("the screen shows %q with the cursor at row %d, column %d; want the bar at 12/30 and the cursor on the next line", s.lines, s.row, s.col)
	}
}

// The worker processes' output goes where Options.Progress says, a
// Terminal a progress bar shares: their log lines come out above the bar,
// which is drawn again below them. Without Progress they write to stderr.
func TestWorkerOutputGoesAboveTheBar(t *testing.T) {
	var buf bytes.Buffer
	term := NewTerminal(&buf)
	term.draw("[bar 3/30]")
	lost := make(chan string, 1)
	procs := &rankProcs{wp: workerProcsOf(Options{WorkerCommand: []string{"sh", "-c", "echo a worker log line >&2"}, Progress: term})}
	if err := procs.launch(os.Environ(), 1, func(_ int, cause string) { lost <- cause }); err != nil {
		t.Fatal(err)
	}
	<-lost
	procs.stop()
	want := clearLine + "[bar 3/30]" + clearLine + "a worker log line\n" + "[bar 3/30]"
	if got := buf.String(); got != want {
		t.Fatalf("the terminal got %q, want %q", got, want)
	}
	if wp := workerProcsOf(Options{}); wp.out != os.Stderr {
		t.Fatalf("without Progress the workers write to %v, want stderr", wp.out)
	}
}
