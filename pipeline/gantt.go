package pipeline

import (
	"bufio"
	"fmt"
	"io"
	"math"
	"strconv"
	"strings"
)

// Gantt writes the timeline as a text chart: one row per stage, one column
// per unit of time from the step's start. A cell shows the op running at
// the column's midpoint in the notation of Op.Short (an op that lasts k
// units fills k cells with its label), or "." when the stage is idle.
// Zero-length spans (free messages) take no cell. A header row numbers the
// columns.
func (tl *Timeline) Gantt(w io.Writer, unit float64) error {
	if !(unit > 0) || math.IsInf(unit, 0) {
		return fmt.Errorf("%w: Gantt unit %v: want a positive time", ErrBadArgument, unit)
	}
	if tl.Stages() == 0 {
		return fmt.Errorf("%w: a timeline with no stages", ErrBadArgument)
	}
	start, end := tl.Window()
	const maxCols = 100000
	ncols := math.Ceil((end - start) / unit)
	if !(ncols <= maxCols) { // compared as a float: it may not fit an int
		return fmt.Errorf("%w: the chart would be %g columns wide (limit %d): use a larger unit", ErrBadArgument, ncols, maxCols)
	}
	cols := int(ncols)
	cells := make([][]string, tl.Stages())
	width := 1
	for s, spans := range tl.Spans {
		row := make([]string, cols)
		for c := range row {
			row[c] = "."
		}
		for _, sp := range spans {
			if sp.End <= sp.Start {
				continue
			}
			// Columns whose midpoint start + (c+½)·unit lies in [Start, End).
			lo := int(math.Ceil((sp.Start-start)/unit - 0.5))
			hi := int(math.Ceil((sp.End-start)/unit - 0.5))
			label := sp.Short()
			for c := max(lo, 0); c < min(hi, cols); c++ {
				row[c] = label
				width = max(width, len(label))
			}
		}
		cells[s] = row
	}
	rowName := func(s int) string { return "stage " + strconv.Itoa(s) }
	nameW := len(rowName(tl.Stages() - 1))
	bw := bufio.NewWriter(w)
	// Number every column if the numbers fit in the cells, else every
	// step-th column, step in 1, 2, 5, 10, 20, 50, …
	step := 1
	for i := 1; !ticksFit(start, unit, cols, step, width); i++ {
		step = []int{1, 2, 5}[i%3] * int(math.Pow10(i/3))
	}
	var hdr strings.Builder
	fmt.Fprintf(&hdr, "%-*s |", nameW, tl.Unit)
	for c := 0; c < cols; c += step {
		cell := formatTick(start + float64(c)*unit)
		fmt.Fprintf(&hdr, " %-*s", step*(width+1)-1, cell)
	}
	bw.WriteString(strings.TrimRight(hdr.String(), " "))
	bw.WriteByte('\n')
	for s, row := range cells {
		var line strings.Builder
		fmt.Fprintf(&line, "%-*s |", nameW, rowName(s))
		for _, cell := range row {
			fmt.Fprintf(&line, " %-*s", width, cell)
		}
		bw.WriteString(strings.TrimRight(line.String(), " "))
		bw.WriteByte('\n')
	}
	return bw.Flush()
}

// ticksFit reports whether every step-th column's time fits in the step
// columns it heads, with a space to spare.
func ticksFit(start, unit float64, cols, step, width int) bool {
	if step >= cols {
		return true
	}
	for c := 0; c < cols; c += step {
		if len(formatTick(start+float64(c)*unit)) > step*(width+1)-1 {
			return false
		}
	}
	return true
}

func formatTick(t float64) string { return strconv.FormatFloat(t, 'g', 6, 64) }
