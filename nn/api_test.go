package nn

import (
	"errors"
	"strings"
	"testing"
)

func testDef(name string, isDefault bool) ModelDef {
	return ModelDef{Name: name, Default: isDefault, New: func(Values, DataShape) (Spec, error) { return nil, nil }}
}

// panicText runs f and returns what it panicked with ("" when it did not).
func panicText(f func()) (msg string) {
	defer func() {
		if p := recover(); p != nil {
			msg, _ = p.(string)
			if msg == "" {
				msg = "non-string panic"
			}
		}
	}()
	f()
	return ""
}

func TestRegistryDefaultModel(t *testing.T) {
	r := newModelRegistry()
	if _, err := r.defaultModel(); !errors.Is(err, ErrConfig) {
		t.Fatalf("empty registry: DefaultModel error %v, want ErrConfig", err)
	}
	r.register(testDef("a", false))
	if _, err := r.defaultModel(); err == nil || !strings.Contains(err.Error(), "registered: a") {
		t.Fatalf("no default: DefaultModel error %v, want one naming the registered models", err)
	}
	r.register(testDef("Big", true))
	d, err := r.defaultModel()
	if err != nil || d.Name != "big" || !d.Default {
		t.Fatalf("DefaultModel = %q (Default %v), %v; want big", d.Name, d.Default, err)
	}
	r.register(testDef("c", false))
	if d, _ := r.defaultModel(); d.Name != "big" {
		t.Fatalf("a later non-default model changed the default to %q", d.Name)
	}
}

func TestRegistrySecondDefaultPanics(t *testing.T) {
	r := newModelRegistry()
	r.register(testDef("first", true))
	msg := panicText(func() { r.register(testDef("second", true)) })
	if !strings.Contains(msg, "second") || !strings.Contains(msg, "first") || !strings.Contains(msg, "default") {
		t.Fatalf("second default: panic %q, want one naming both models and the default", msg)
	}
	if _, err := r.lookup("second"); err == nil {
		t.Fatal("the refused second default was registered anyway")
	}
	if d, _ := r.defaultModel(); d.Name != "first" {
		t.Fatalf("default after the refused one: %q, want first", d.Name)
	}
	// A default refused as a duplicate name does not take the default.
	r2 := newModelRegistry()
	r2.register(testDef("x", false))
	if msg := panicText(func() { r2.register(testDef("x", true)) }); !strings.Contains(msg, "registered twice") {
		t.Fatalf("duplicate name: panic %q", msg)
	}
	if _, err := r2.defaultModel(); err == nil {
		t.Fatal("a default refused as a duplicate name became the default")
	}
}
