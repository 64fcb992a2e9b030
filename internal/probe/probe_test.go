package probe

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestFile(t *testing.T) {
	dir := t.TempDir()
	existing := filepath.Join(dir, "old.bin")
	if err := os.WriteFile(existing, []byte("kept"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		path, want string // want: "" for no error, else a part of the message
	}{
		{filepath.Join(dir, "new.bin"), ""},
		{existing, ""},
		{filepath.Join(dir, "missing", "x.bin"), "does not exist"},
		{filepath.Join(existing, "x.bin"), "is not a directory"},
		{dir, "is a directory"},
	} {
		err := File(tc.path)
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("File(%s): %v", tc.path, err)
		case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("File(%s) = %v, want an error saying %q", tc.path, err, tc.want)
		}
	}
	if b, err := os.ReadFile(existing); err != nil || string(b) != "kept" {
		t.Errorf("the existing file after the probe: %q, %v", b, err)
	}
	if _, err := os.Stat(filepath.Join(dir, "new.bin")); !os.IsNotExist(err) {
		t.Errorf("the probe created the output itself: %v", err)
	}
	assertOnly(t, dir, "old.bin")
}

func TestDir(t *testing.T) {
	dir := t.TempDir()
	file := filepath.Join(dir, "f")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := Dir(file); err == nil || !strings.Contains(err.Error(), "is a file, not a directory") {
		t.Errorf("Dir(a file) = %v", err)
	}
	nested := filepath.Join(dir, "a", "b")
	if err := Dir(nested); err != nil {
		t.Fatalf("Dir(a new directory): %v", err)
	}
	assertOnly(t, nested)
	if err := Dir(nested); err != nil {
		t.Errorf("Dir(an existing directory): %v", err)
	}
	if err := Dir(filepath.Join(file, "sub")); err == nil {
		t.Error("Dir under a file: no error")
	}
}

// assertOnly fails unless dir holds exactly the names given (no probe
// file left behind).
func assertOnly(t *testing.T, dir string, names ...string) {
	t.Helper()
	es, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	for _, e := range es {
		got = append(got, e.Name())
	}
	if strings.Join(got, ",") != strings.Join(names, ",") {
		t.Errorf("%s holds %v, want %v", dir, got, names)
	}
}
