package train

import (
	"testing"

	"github.com/troupe-ml/troupe/nn"
)

// `troupe train` with no flags trains the registry's default model, and
// the default configuration validates.
func TestDefaultConfigTakesTheRegistrysDefaultModel(t *testing.T) {
	def, err := nn.DefaultModel()
	if err != nil {
		t.Fatal(err)
	}
	c := DefaultConfig()
	if c.Model != def.Name {
		t.Fatalf("DefaultConfig().Model = %q, registry's default %q", c.Model, def.Name)
	}
	if err := c.Validate(); err != nil {
		t.Fatalf("DefaultConfig() does not validate: %v", err)
	}
}
