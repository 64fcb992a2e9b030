package train

import (
	"errors"
	"testing"
	"time"

	"github.com/troupe-ml/troupe/actors"
)

// The agent's own settings are checked without being changed; Train's
// errors name Train's fields.
func TestAgentConfigValidate(t *testing.T) {
	base := func() AgentConfig {
		return AgentConfig{Train: tinyMLP(), Name: "n1", Listen: "127.0.0.1:0"}
	}
	ac := base()
	if err := ac.Validate(); err != nil {
		t.Fatal(err)
	}
	zero := base()
	zero.Train.Zero, zero.Train.ZeroGroup = 3, 2
	if err := zero.Validate(); err != nil {
		t.Fatalf("ZeRO-3 in shard groups of 2: %v", err)
	}
	if ac.LostStageTimeout != 0 || ac.Rescale != "" {
		t.Fatal("Validate changed the configuration")
	}
	if d := ac.withDefaults(); d.LostStageTimeout != time.Minute || d.Rescale != KeepGlobalBatch || d.MinNodes != 1 {
		t.Fatalf("defaults: %+v", d)
	}
	for want, mut := range map[string]func(*AgentConfig){
		"LostStageTimeout": func(c *AgentConfig) { c.LostStageTimeout = -time.Second },
		"Rescale":          func(c *AgentConfig) { c.Rescale = "double" },
		"Name":             func(c *AgentConfig) { c.Name = "" },
		"Listen":           func(c *AgentConfig) { c.Listen = "no-port" },
		"Timings":          func(c *AgentConfig) { c.Timings = "glacial" },
		"Key":              func(c *AgentConfig) { c.Key = "hex:zz" },
		"MinNodes":         func(c *AgentConfig) { c.MinNodes, c.MaxNodes = 3, 2 },
		"Train.DP":         func(c *AgentConfig) { c.Train.DP = 2 },
		"Train.Transport":  func(c *AgentConfig) { c.Train.Transport = actors.TransportShm },
		"Train.Trace":      func(c *AgentConfig) { c.Train.PP, c.Train.MicroBatches, c.Train.Trace = 2, 2, "t.json" },
		"Train.Batch":      func(c *AgentConfig) { c.Train.Batch = -1 },
		"Train.ZeroGroup":  func(c *AgentConfig) { c.Train.Zero = 2 },
		"Train.Zero":       func(c *AgentConfig) { c.Train.Zero, c.Train.ZeroGroup = 4, 2 },
	} {
		ac := base()
		mut(&ac)
		var fe *FieldError
		if err := ac.Validate(); !errors.As(err, &fe) || fe.Field != want || !errors.Is(err, ErrConfig) {
			t.Errorf("%v, want a config error naming %s", err, want)
		}
	}
}
