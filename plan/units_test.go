package plan

import (
	"errors"
	"math"
	"strconv"
	"strings"
	"testing"
)

// Every expected value here is worked by hand and compared exactly: the
// parsers promise that decimal units are applied to the text, not by a
// rounded multiplication, so there is no tolerance to allow.

func TestParseBytes(t *testing.T) {
	cases := []struct {
		in   string
		want int64
	}{
		{"0", 0},
		{"1", 1},
		{"512", 512},
		{"24e9", 24_000_000_000},
		{"1.5e3", 1500},
		{"80GB", 80_000_000_000},
		{"80 GB", 80_000_000_000},
		{" 16GB ", 16_000_000_000},
		{"+16GB", 16_000_000_000},
		{"1.2GB", 1_200_000_000},
		{"0.1kB", 100},
		{"2KB", 2000},
		{"3kB", 3000},
		{"7MB", 7_000_000},
		{"1TB", 1_000_000_000_000},
		{"2PB", 2_000_000_000_000_000},
		{"512MiB", 512 << 20},
		{"1KiB", 1024},
		{"1.5KiB", 1536},
		{"40GiB", 40 << 30},
		{"1TiB", 1 << 40},
		{"1PiB", 1 << 50},
		{".5kB", 500},
		{"5.GB", 5_000_000_000},
		{"1e3KB", 1_000_000},
		{"1.5e-3GB", 1_500_000},
		{"100B", 100},
		{"4E3", 4000},
	}
	for _, c := range cases {
		got, err := ParseBytes(c.in)
		if err != nil {
			t.Errorf("ParseBytes(%q): %v", c.in, err)
			continue
		}
		if got != c.want {
			t.Errorf("ParseBytes(%q) = %d, want %d", c.in, got, c.want)
		}
	}
}

func TestParseBytesErrors(t *testing.T) {
	cases := []struct {
		in   string
		want error
	}{
		{"", ErrEmpty},
		{"   ", ErrEmpty},
		{"-1", ErrNegative},
		{"-80GB", ErrNegative},
		{"NaN", ErrNotFinite},
		{"inf", ErrNotFinite},
		{"+Inf", ErrNotFinite},
		{"1e400", ErrNotFinite},
		{"1e99999999999999999999", ErrNotFinite},
		{"10000PB", ErrNotFinite}, // 10^19 > int64
		{"GB", ErrSyntax},
		{".", ErrSyntax},
		{"abc", ErrSyntax},
		{"80XB", ErrUnknownUnit},
		{"80gb", ErrUnknownUnit}, // could be gigabits: refused, not guessed
		{"80Gb", ErrUnknownUnit},
		{"80G", ErrUnknownUnit},
		{"80GB/s", ErrUnknownUnit},
		{"1e", ErrUnknownUnit},
		{"1e+", ErrUnknownUnit},
		{"1..2", ErrUnknownUnit},
		{"0x10", ErrUnknownUnit},
		{"1_000", ErrUnknownUnit},
		{"1.5", ErrNotWhole},
		{"1.0001kB", ErrNotWhole},
	}
	for _, c := range cases {
		_, err := ParseBytes(c.in)
		if !errors.Is(err, c.want) {
			t.Errorf("ParseBytes(%q) error = %v, want %v", c.in, err, c.want)
			continue
		}
		if !strings.Contains(err.Error(), strconv.Quote(c.in)) {
			t.Errorf("ParseBytes(%q) error %q does not name the text", c.in, err)
		}
	}
}

func TestParseBandwidth(t *testing.T) {
	cases := []struct {
		in   string
		want float64
	}{
		{"25GB/s", 25e9},
		{"200Gbps", 25e9},
		{"200Gb/s", 25e9},
		{"100 Gbps", 12.5e9},
		{"1bps", 0.125},
		{"8b/s", 1},
		{"10Mbps", 1.25e6},
		{"1Kbps", 125},
		{"1kbps", 125},
		{"1Tbps", 125e9},
		{"1.6Tb/s", 200e9},
		{"10GiB/s", 10 << 30},
		{"1KiB/s", 1024},
		{"3B/s", 3},
		{"12e9", 12e9},
		{"0.5", 0.5},
		{"450MB/s", 450e6},
		{"1kB/s", 1000},
		{"1KB/s", 1000},
		{"1TB/s", 1e12},
		{"0", 0},
	}
	for _, c := range cases {
		got, err := ParseBandwidth(c.in)
		if err != nil {
			t.Errorf("ParseBandwidth(%q): %v", c.in, err)
			continue
		}
		if got != c.want {
			t.Errorf("ParseBandwidth(%q) = %v, want %v", c.in, got, c.want)
		}
	}
	for _, in := range []string{"", "-1GB/s", "NaN", "25GB", "25 GBps", "25gbps", "25Gbit", "x", "1e999GB/s"} {
		if _, err := ParseBandwidth(in); err == nil {
			t.Errorf("ParseBandwidth(%q) succeeded, want an error", in)
		} else if !strings.Contains(err.Error(), strconv.Quote(in)) {
			t.Errorf("ParseBandwidth(%q) error %q does not name the text", in, err)
		}
	}
}

func TestParseCount(t *testing.T) {
	cases := []struct {
		in   string
		want int64
	}{
		{"1", 1},
		{"175e9", 175_000_000_000},
		{"7.5B", 7_500_000_000},
		{"7b", 7_000_000_000},
		{"1.5B", 1_500_000_000},
		{"500M", 500_000_000},
		{"500m", 500_000_000},
		{"40K", 40_000},
		{"40k", 40_000},
		{"1.5T", 1_500_000_000_000},
		{"1e12", 1_000_000_000_000},
		{"0.5K", 500},
		{"1.234567891B", 1_234_567_891},
	}
	for _, c := range cases {
		got, err := ParseCount(c.in)
		if err != nil {
			t.Errorf("ParseCount(%q): %v", c.in, err)
			continue
		}
		if got != c.want {
			t.Errorf("ParseCount(%q) = %d, want %d", c.in, got, c.want)
		}
	}
	errCases := []struct {
		in   string
		want error
	}{
		{"", ErrEmpty},
		{"-7B", ErrNegative},
		{"1.5", ErrNotWhole},
		{"1.2345678912B", ErrNotWhole},
		{"7G", ErrUnknownUnit},
		{"7 billion", ErrUnknownUnit},
		{"1e30", ErrNotFinite},
		{"nan", ErrNotFinite},
	}
	for _, c := range errCases {
		if _, err := ParseCount(c.in); !errors.Is(err, c.want) {
			t.Errorf("ParseCount(%q) error = %v, want %v", c.in, err, c.want)
		}
	}
}

// checkParsed holds the invariants every accepted value keeps and every
// error message keeps, whatever the input.
func checkParsed(t *testing.T, fn string, s string, v float64, err error) {
	t.Helper()
	if err != nil {
		if !strings.Contains(err.Error(), strconv.Quote(s)) {
			t.Fatalf("%s(%q) error %q does not name the text", fn, s, err)
		}
		return
	}
	if math.IsNaN(v) || math.IsInf(v, 0) || v < 0 {
		t.Fatalf("%s(%q) = %v, want finite and ≥ 0", fn, s, v)
	}
}

func FuzzParseBytes(f *testing.F) {
	for _, s := range []string{"80GB", "1.2GB", "512MiB", "24e9", "-1", "NaN", "80XB", "", "1e", ".5kB", "9223372036854775807", "1e-400"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		v, err := ParseBytes(s)
		checkParsed(t, "ParseBytes", s, float64(v), err)
		if err == nil {
			// A plain number of bytes reads back as itself, and the binary
			// unit is exactly a power of two apart.
			if back, err := ParseBytes(strconv.FormatInt(v, 10)); err != nil || back != v {
				t.Fatalf("ParseBytes(%d) = %d, %v after ParseBytes(%q)", v, back, err, s)
			}
			if v < 1<<40 {
				if kib, err := ParseBytes(strconv.FormatInt(v, 10) + "KiB"); err != nil || kib != v*1024 {
					t.Fatalf("ParseBytes(%dKiB) = %d, %v; want %d", v, kib, err, v*1024)
				}
			}
		}
	})
}

func FuzzParseBandwidth(f *testing.F) {
	for _, s := range []string{"25GB/s", "200Gbps", "10GiB/s", "1bps", "-1", "inf", "25GB", "", "1e-400Gbps"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		v, err := ParseBandwidth(s)
		checkParsed(t, "ParseBandwidth", s, v, err)
		if err == nil && !strings.Contains(s, "e") && !strings.Contains(s, "E") {
			// Without an exponent in the way, 8 bits per byte: the same
			// number in bps (decimal) is one eighth of it in B/s.
			num := strings.TrimSpace(s)
			if u := strings.TrimLeft(num, "+0123456789."); u == "" {
				bits, err := ParseBandwidth(num + "bps")
				if err != nil || bits != v/8 {
					t.Fatalf("ParseBandwidth(%qbps) = %v, %v; want %v", num, bits, err, v/8)
				}
			}
		}
	})
}

func FuzzParseCount(f *testing.F) {
	for _, s := range []string{"175e9", "7.5B", "500M", "40k", "1.5", "-7B", "7G", "", "1e30"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		v, err := ParseCount(s)
		checkParsed(t, "ParseCount", s, float64(v), err)
	})
}
