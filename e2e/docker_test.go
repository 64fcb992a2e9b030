//go:build long

package e2e

import (
	"debug/elf"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"
)

// TestDockerfileBuildsAStaticBinary runs the Dockerfile's build command (no
// container runtime here: the command itself, from the repository's root)
// and checks that the binary is static, as the distroless static image
// needs (no dynamic loader, no shared library), and that it runs.
func TestDockerfileBuildsAStaticBinary(t *testing.T) {
	b, err := os.ReadFile("../Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^RUN (CGO_ENABLED=0 go build .*-o )(\S+)( \./cmd/troupe)\s*$`).FindSubmatch(b)
	if m == nil {
		t.Fatal("the Dockerfile has no `RUN CGO_ENABLED=0 go build … -o OUT ./cmd/troupe` line")
	}
	if !strings.Contains(string(b), "COPY --from=build "+string(m[2])+" ") {
		t.Fatalf("the final stage does not copy %s", m[2])
	}
	bin := filepath.Join(t.TempDir(), "troupe")
	cmd := exec.Command("sh", "-c", string(m[1])+bin+string(m[3]))
	cmd.Dir = ".."
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%s: %v\n%s", cmd.Args, err, out)
	}
	f, err := elf.Open(bin)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	for _, p := range f.Progs {
		if p.Type == elf.PT_INTERP {
			t.Fatal("the binary asks for a dynamic loader: not static")
		}
	}
	if libs, _ := f.ImportedLibraries(); len(libs) > 0 {
		t.Fatalf("the binary needs %v", libs)
	}
	out, _, err := run(t, time.Minute, bin, "certs", "--help")
	if err != nil || !strings.Contains(out, "troupe certs") {
		t.Fatalf("the static binary: %v\n%s", err, out)
	}
}
