package plan

import (
	"fmt"
	"math"
	"strconv"
	"strings"
)

// scale is what a unit suffix multiplies the number by: 10^exp10 · 2^exp2,
// divided by 8 when the unit counts bits. Decimal powers are applied to the
// number's text before it is converted, and binary powers and the bit
// divisor are exact in floating point, so "1.2GB" is exactly 1200000000 and
// not 1.2·1e9 rounded twice.
type scale struct {
	exp10 int
	exp2  int
	bits  bool
}

// byteUnits are the size suffixes: decimal as networks and vendors quote them
// (80GB = 80·10⁹ bytes), binary with the IEC "i". Lower-case "b" is left out
// on purpose: "80gb" could mean gigabits, and a size is too important to guess.
var byteUnits = map[string]scale{
	"": {}, "B": {},
	"kB": {exp10: 3}, "KB": {exp10: 3}, "MB": {exp10: 6}, "GB": {exp10: 9}, "TB": {exp10: 12}, "PB": {exp10: 15},
	"KiB": {exp2: 10}, "MiB": {exp2: 20}, "GiB": {exp2: 30}, "TiB": {exp2: 40}, "PiB": {exp2: 50},
}

const byteUnitList = "B, kB (or KB), MB, GB, TB, PB, KiB, MiB, GiB, TiB, PiB"

// bandwidthUnits are bytes per second ("25GB/s", bare numbers too) and bits
// per second ("200Gbps" or "200Gb/s" = 25·10⁹ bytes/s), as NICs are sold.
var bandwidthUnits = func() map[string]scale {
	m := map[string]scale{}
	for u, s := range byteUnits {
		if u == "" {
			m[""] = s
			continue
		}
		m[u+"/s"] = s
	}
	for _, p := range []struct {
		prefix string
		exp10  int
	}{{"", 0}, {"k", 3}, {"K", 3}, {"M", 6}, {"G", 9}, {"T", 12}} {
		s := scale{exp10: p.exp10, bits: true}
		m[p.prefix+"bps"] = s
		m[p.prefix+"b/s"] = s
	}
	return m
}()

const bandwidthUnitList = "B/s, kB/s, MB/s, GB/s, TB/s, PB/s, KiB/s … PiB/s, bps, Kbps, Mbps, Gbps, Tbps (or Gb/s …)"

// countUnits are the suffixes used for parameter counts ("7.5B", "500M").
// Case does not matter: no one counts parameters in milli-units, and "7b" is
// how model names are written.
var countUnits = map[string]scale{
	"":  {},
	"k": {exp10: 3}, "K": {exp10: 3},
	"m": {exp10: 6}, "M": {exp10: 6},
	"b": {exp10: 9}, "B": {exp10: 9},
	"t": {exp10: 12}, "T": {exp10: 12},
}

const countUnitList = "K (thousand), M (million), B (billion), T (trillion), or none"

// maxExponent bounds the exponent written in the text. Anything beyond it is
// out of float64's range anyway, and the bound keeps exponent arithmetic from
// overflowing on adversarial input.
const maxExponent = 10000

// ParseBytes parses a size in bytes: a number with an optional decimal (kB,
// MB, GB, TB, PB = 10^3k) or binary (KiB, MiB, GiB, TiB, PiB = 2^10k) unit,
// e.g. "80GB", "1.2GB", "512MiB", "24e9". The result must be a whole number
// of bytes that fits in an int64.
func ParseBytes(s string) (int64, error) {
	v, err := parseQuantity(s, byteUnits, "size", byteUnitList)
	if err != nil {
		return 0, err
	}
	return toWhole(s, v, "size")
}

// ParseBandwidth parses a bandwidth and returns it in bytes per second:
// "25GB/s", "10GiB/s", "200Gbps" (= 25·10⁹ B/s), or a bare number of bytes
// per second.
func ParseBandwidth(s string) (float64, error) {
	return parseQuantity(s, bandwidthUnits, "bandwidth", bandwidthUnitList)
}

// ParseCount parses a count such as a number of parameters: "175e9",
// "7.5B", "500M", "1.5T", "40K". The result must be a whole number that fits
// in an int64.
func ParseCount(s string) (int64, error) {
	v, err := parseQuantity(s, countUnits, "count", countUnitList)
	if err != nil {
		return 0, err
	}
	return toWhole(s, v, "count")
}

// parseQuantity reads "<number><unit>" where number is decimal digits with an
// optional fraction and exponent; blanks around the number and unit are
// allowed. It rejects signs other than "+", NaN, infinities and unknown
// units, naming the text in every error.
func parseQuantity(s string, units map[string]scale, what, unitList string) (float64, error) {
	t := strings.TrimSpace(s)
	if t == "" {
		return 0, fmt.Errorf("%w: %s %q", ErrEmpty, what, s)
	}
	if t[0] == '-' {
		return 0, fmt.Errorf("%w: %s %q", ErrNegative, what, s)
	}
	if t[0] == '+' {
		t = t[1:]
	}
	if lower := strings.ToLower(t); strings.HasPrefix(lower, "nan") || strings.HasPrefix(lower, "inf") {
		return 0, fmt.Errorf("%w: %s %q", ErrNotFinite, what, s)
	}

	i := 0
	intStart := i
	for i < len(t) && isDigit(t[i]) {
		i++
	}
	intPart := t[intStart:i]
	var fracPart string
	if i < len(t) && t[i] == '.' {
		i++
		fracStart := i
		for i < len(t) && isDigit(t[i]) {
			i++
		}
		fracPart = t[fracStart:i]
	}
	if intPart == "" && fracPart == "" {
		return 0, fmt.Errorf("%w: %s %q", ErrSyntax, what, s)
	}
	exp := 0
	if i < len(t) && (t[i] == 'e' || t[i] == 'E') {
		// An "e" not followed by digits is left to the unit, which then
		// fails as unknown: no unit starts with "e".
		j := i + 1
		neg := false
		if j < len(t) && (t[j] == '+' || t[j] == '-') {
			neg = t[j] == '-'
			j++
		}
		digStart := j
		for j < len(t) && isDigit(t[j]) {
			if exp <= maxExponent {
				exp = exp*10 + int(t[j]-'0')
			}
			j++
		}
		if j > digStart {
			if exp > maxExponent {
				return 0, fmt.Errorf("%w: %s %q: exponent too large", ErrNotFinite, what, s)
			}
			if neg {
				exp = -exp
			}
			i = j
		} else {
			exp = 0
		}
	}
	unit := strings.TrimSpace(t[i:])
	sc, ok := units[unit]
	if !ok {
		return 0, fmt.Errorf("%w %q in %s %q: want %s", ErrUnknownUnit, unit, what, s, unitList)
	}

	if intPart == "" {
		intPart = "0"
	}
	text := intPart
	if fracPart != "" {
		text += "." + fracPart
	}
	text += "e" + strconv.Itoa(exp+sc.exp10)
	v, err := strconv.ParseFloat(text, 64)
	if err != nil {
		// The text was built from digits only, so the one possible error is
		// a value beyond float64's range (too large or too small).
		return 0, fmt.Errorf("%w: %s %q", ErrNotFinite, what, s)
	}
	v = math.Ldexp(v, sc.exp2)
	if sc.bits {
		v /= 8
	}
	if math.IsInf(v, 0) {
		return 0, fmt.Errorf("%w: %s %q", ErrNotFinite, what, s)
	}
	return v, nil
}

// toWhole converts a parsed value to an int64, refusing fractions and values
// beyond int64.
func toWhole(s string, v float64, what string) (int64, error) {
	if v >= math.MaxInt64 { // MaxInt64 rounds up to 2^63 as a float64
		return 0, fmt.Errorf("%w: %s %q is too large", ErrNotFinite, what, s)
	}
	if v != math.Trunc(v) {
		return 0, fmt.Errorf("%w: %s %q is %v", ErrNotWhole, what, s, v)
	}
	return int64(v), nil
}

func isDigit(c byte) bool { return '0' <= c && c <= '9' }
