package train

import (
	"bytes"
	"encoding/json"
	"flag"
	"os"
	"path/filepath"
	"reflect"
	"testing"

	"sigs.k8s.io/yaml"
)

var updateConfigGolden = flag.Bool("update-config-golden", false, "rewrite testdata/config_default.{json,yaml}")

// Config's serialized form is what checkpoint manifests, worker processes'
// environment and troupe report carry: one flat object, its keys the Go
// field names in a fixed order. The goldens were written before the
// fields were grouped into sub-structs; they must not change.
func TestConfigSerializedFormIsStable(t *testing.T) {
	cfg := DefaultConfig()
	cfg.SetModelArg("d-model", 256)
	j, err := json.MarshalIndent(cfg, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	y, err := yaml.Marshal(cfg)
	if err != nil {
		t.Fatal(err)
	}
	for _, g := range []struct {
		file string
		got  []byte
	}{{"config_default.json", j}, {"config_default.yaml", y}} {
		path := filepath.Join("testdata", g.file)
		if *updateConfigGolden {
			if err := os.WriteFile(path, g.got, 0o644); err != nil {
				t.Fatal(err)
			}
			continue
		}
		want, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(g.got, want) {
			t.Errorf("%s changed:\n got %s\nwant %s", g.file, g.got, want)
		}
	}
	var back Config
	if err := json.Unmarshal(j, &back); err != nil {
		t.Fatal(err)
	}
	if !reflect.DeepEqual(back, cfg) {
		t.Errorf("round trip: got %+v, want %+v", back, cfg)
	}
}
