package cli

import (
	"errors"
	"reflect"
	"testing"

	"github.com/troupe-ml/troupe/train"
)

// Every field of the training and agent configurations has its flag, so
// that no configuration error names a Go field to a CLI user.
func TestEveryConfigFieldHasAFlag(t *testing.T) {
	for _, typ := range []reflect.Type{reflect.TypeOf(train.Config{}), reflect.TypeOf(train.AgentConfig{})} {
		for _, f := range reflect.VisibleFields(typ) {
			if f.Name == "Train" || f.Anonymous {
				continue
			}
			if _, ok := flagOf[f.Name]; !ok {
				t.Errorf("%s.%s has no flag in flagOf", typ.Name(), f.Name)
			}
		}
	}
}

// A configuration error reads in flags, and stays a configuration error.
func TestConfigErrorsInFlags(t *testing.T) {
	cfg := train.DefaultConfig()
	cfg.Batch, cfg.Accum = 12, 5
	err := inFlags(cfg.Validate())
	if err.Error() != "--batch 12 is not divisible by --accum 5" || !errors.Is(err, train.ErrConfig) {
		t.Fatalf("%q", err)
	}
	ac := train.AgentConfig{Train: train.DefaultConfig(), Name: "n1", Listen: "127.0.0.1:0"}
	ac.Train.Batch = 0
	if err := inFlags(ac.Validate()); err.Error() != "--batch must be positive, got 0" {
		t.Fatalf("%q", err)
	}
}
