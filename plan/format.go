package plan

import (
	"fmt"
	"math"
	"strconv"
)

// FormatBytes writes a byte count for people, in decimal units as devices
// are sold, to three significant digits: "24.0 GB", "2.25 GB", "375 MB",
// "512 B". The exact count belongs beside it
// where it matters; this is the rounded reading.
func FormatBytes(b float64) string {
	return formatDecimal(b, "B", []string{"kB", "MB", "GB", "TB", "PB", "EB"})
}

// FormatBandwidth writes bytes per second for people: "25.0 GB/s".
func FormatBandwidth(bps float64) string {
	return formatDecimal(bps, "B/s", []string{"kB/s", "MB/s", "GB/s", "TB/s", "PB/s", "EB/s"})
}

func formatDecimal(v float64, base string, units []string) string {
	if math.IsNaN(v) || math.IsInf(v, 0) {
		return strconv.FormatFloat(v, 'g', -1, 64) + " " + base
	}
	if math.Abs(v) < 1000 {
		if v == math.Trunc(v) {
			return strconv.FormatFloat(v, 'f', 0, 64) + " " + base
		}
		return strconv.FormatFloat(v, 'f', 1, 64) + " " + base
	}
	v /= 1000
	for u := 0; ; u++ {
		// Three significant digits: "2.25 GB", "24.0 GB", "375 MB". A value
		// that rounds up to 1000 moves on to the next unit while there is one.
		a := math.Abs(v)
		if a >= 999.5 && u+1 < len(units) {
			v /= 1000
			continue
		}
		prec := 0
		switch {
		case a < 9.995:
			prec = 2
		case a < 99.95:
			prec = 1
		}
		return strconv.FormatFloat(v, 'f', prec, 64) + " " + units[u]
	}
}

// FormatCount writes a count with K/M/B/T suffixes and up to four
// significant digits: "1.5B", "175B", "7.5B", "1.235B".
func FormatCount(n float64) string {
	suffixes := []struct {
		div float64
		s   string
	}{{1e12, "T"}, {1e9, "B"}, {1e6, "M"}, {1e3, "K"}}
	for _, x := range suffixes {
		if math.Abs(n) >= x.div {
			return strconv.FormatFloat(n/x.div, 'g', 4, 64) + x.s
		}
	}
	return strconv.FormatFloat(n, 'g', 4, 64)
}

// FormatMillis writes a duration given in milliseconds, in the unit that
// reads best: "0.250 ms", "4.85 ms", "480.0 ms", "12.30 s", "16.7 min", "2.8 h".
func FormatMillis(ms float64) string {
	switch a := math.Abs(ms); {
	case ms == 0:
		return "0 ms"
	case math.IsNaN(ms) || math.IsInf(ms, 0):
		return fmt.Sprintf("%v ms", ms)
	case a < 1:
		return fmt.Sprintf("%.3f ms", ms)
	case a < 10:
		return fmt.Sprintf("%.2f ms", ms)
	case a < 1000:
		return fmt.Sprintf("%.1f ms", ms)
	case a < 120e3:
		return fmt.Sprintf("%.2f s", ms/1e3)
	case a < 7200e3:
		return fmt.Sprintf("%.1f min", ms/60e3)
	default:
		return fmt.Sprintf("%.1f h", ms/3600e3)
	}
}

// FormatPercent writes a fraction as a percentage: 0.25 → "25.0%".
func FormatPercent(f float64) string {
	return strconv.FormatFloat(f*100, 'f', 1, 64) + "%"
}
