package models_test

import (
	"testing"

	_ "github.com/troupe-ml/troupe/models"
	"github.com/troupe-ml/troupe/nn"
)

// The GPT is the model trained when none is named, and the only one of the
// shipped models to say so (a second would panic at init).
func TestGPTIsTheDefaultModel(t *testing.T) {
	d, err := nn.DefaultModel()
	if err != nil {
		t.Fatal(err)
	}
	if d.Name != "gpt" || d.Data != "gospec" {
		t.Fatalf("default model %q on %q, want gpt on gospec", d.Name, d.Data)
	}
	for _, m := range nn.Models() {
		if m.Default != (m.Name == "gpt") {
			t.Errorf("model %s: Default %v", m.Name, m.Default)
		}
	}
}
