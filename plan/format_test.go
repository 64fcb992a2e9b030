package plan

import "testing"

func TestFormat(t *testing.T) {
	cases := []struct{ got, want string }{
		{FormatBytes(24e9), "24.0 GB"},
		{FormatBytes(375e6), "375 MB"},
		{FormatBytes(2.25e9), "2.25 GB"},
		{FormatBytes(3e9), "3.00 GB"},
		{FormatBytes(512), "512 B"},
		{FormatBytes(0), "0 B"},
		{FormatBytes(12.5), "12.5 B"},
		{FormatBytes(2.8e12), "2.80 TB"},
		{FormatBytes(1536), "1.54 kB"},
		{FormatBytes(999.5e3), "1.00 MB"},
		{FormatBytes(9.999e9), "10.0 GB"},
		{FormatBytes(99.99e6), "100 MB"},
		{FormatBytes(5e21), "5000 EB"},
		{FormatBandwidth(25e9), "25.0 GB/s"},
		{FormatBandwidth(0.125), "0.1 B/s"},
		{FormatCount(1.5e9), "1.5B"},
		{FormatCount(175e9), "175B"},
		{FormatCount(7.5e9), "7.5B"},
		{FormatCount(1234567891), "1.235B"},
		{FormatCount(500e6), "500M"},
		{FormatCount(40e3), "40K"},
		{FormatCount(999), "999"},
		{FormatCount(1.5e12), "1.5T"},
		{FormatMillis(0.25), "0.250 ms"},
		{FormatMillis(0), "0 ms"},
		{FormatMillis(4.85), "4.85 ms"},
		{FormatMillis(480), "480.0 ms"},
		{FormatMillis(12300), "12.30 s"},
		{FormatMillis(1000e3), "16.7 min"},
		{FormatMillis(10000e3), "2.8 h"},
		{FormatPercent(0.25), "25.0%"},
	}
	for _, c := range cases {
		if c.got != c.want {
			t.Errorf("got %q, want %q", c.got, c.want)
		}
	}
}
