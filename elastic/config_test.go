package elastic

import (
	"errors"
	"strings"
	"testing"
	"time"
)

func TestConfigValidate(t *testing.T) {
	c := Config{Name: "gpu-node.1"}
	if err := c.Validate(); err != nil {
		t.Fatal(err)
	}
	if c.BindAddr != "127.0.0.1:0" || c.MinNodes != 1 || c.JoinTimeout != 30*time.Second || c.Timings != FastTimings() {
		t.Fatalf("defaults not filled: %+v", c)
	}
	for name, tc := range map[string]struct {
		edit func(*Config)
		want string
	}{
		"bad name":     {func(c *Config) { c.Name = "a b" }, "name"},
		"long name":    {func(c *Config) { c.Name = strings.Repeat("n", 65) }, "name"},
		"bad bind":     {func(c *Config) { c.BindAddr = "localhost" }, "BindAddr"},
		"bad port":     {func(c *Config) { c.BindAddr = "127.0.0.1:http" }, "BindAddr"},
		"bad join":     {func(c *Config) { c.Join = []string{"127.0.0.1:70000"} }, "Join"},
		"short key":    {func(c *Config) { c.Key = []byte("short") }, "bytes"},
		"min > max":    {func(c *Config) { c.MinNodes, c.MaxNodes = 4, 2 }, "MinNodes"},
		"probe timing": {func(c *Config) { c.Timings.ProbeTimeout = time.Second }, "ProbeTimeout"},
		"many devices": {func(c *Config) { c.Devices = make([]string, maxDevices+1) }, "devices"},
	} {
		c := Config{Name: "n"}
		tc.edit(&c)
		err := c.Validate()
		if err == nil || !(errors.Is(err, ErrBadConfig) || errors.Is(err, ErrBadKey)) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%s: got %v, want an error naming %q", name, err, tc.want)
		}
	}
}

func TestParseTimings(t *testing.T) {
	for in, want := range map[string]Timings{"": FastTimings(), "loopback": FastTimings(), "fast": FastTimings(), "lan": LANTimings(), "wan": WANTimings()} {
		got, err := ParseTimings(in)
		if err != nil || got != want {
			t.Errorf("%q: %+v, %v", in, got, err)
		}
		if err := got.validate(); err != nil {
			t.Errorf("%q: preset does not validate: %v", in, err)
		}
	}
	if _, err := ParseTimings("slow"); !errors.Is(err, ErrBadConfig) {
		t.Errorf("got %v", err)
	}
}
