package cli

import (
	"os"
	"os/exec"
	"path/filepath"
	"runtime"
	"runtime/debug"
	"strings"
	"testing"
)

func TestVersionText(t *testing.T) {
	bi := &debug.BuildInfo{GoVersion: "go1.26.0", Main: debug.Module{Path: "github.com/troupe-ml/troupe", Version: "v0.3.0"},
		Settings: []debug.BuildSetting{{Key: "vcs", Value: "git"}, {Key: "vcs.revision", Value: "0b9d53c1"},
			{Key: "vcs.time", Value: "2026-01-02T03:04:05Z"}, {Key: "vcs.modified", Value: "true"}}}
	want := "troupe v0.3.0 (github.com/troupe-ml/troupe)\n" +
		"revision 0b9d53c1, committed 2026-01-02T03:04:05Z, with uncommitted changes\n" +
		"built with go1.26.0 for " + runtime.GOOS + "/" + runtime.GOARCH + "\n"
	if got := versionText(bi); got != want {
		t.Errorf("got\n%s\nwant\n%s", got, want)
	}
	bi.Settings[3].Value = "false"
	if got := versionText(bi); !strings.Contains(got, "\nrevision 0b9d53c1, committed 2026-01-02T03:04:05Z\n") {
		t.Errorf("a clean checkout's revision line: got\n%s", got)
	}
	for _, bi := range []*debug.BuildInfo{nil, {Main: debug.Module{Version: "(devel)"}}, {}} {
		got := versionText(bi)
		if !strings.HasPrefix(got, "troupe (devel) (github.com/troupe-ml/troupe)\nrevision unknown (") {
			t.Errorf("without a version or a revision: got\n%s", got)
		}
	}
}

// troupe --version prints the version and a revision line, and nothing
// runs.
func TestVersionFlag(t *testing.T) {
	t.Cleanup(func() { _ = rootCmd.Flags().Set("version", "false") })
	out, err := runRoot(t, "--version")
	if err != nil {
		t.Fatal(err)
	}
	lines := strings.Split(strings.TrimSuffix(out, "\n"), "\n")
	if len(lines) != 3 || !strings.HasPrefix(lines[0], "troupe ") || !strings.HasPrefix(lines[1], "revision ") {
		t.Fatalf("troupe --version printed\n%s", out)
	}
}

// A binary built from a git checkout names the checkout's commit.
func TestVersionOfABuild(t *testing.T) {
	if testing.Short() {
		t.Skip("builds troupe")
	}
	root, err := filepath.Abs("..")
	if err != nil {
		t.Fatal(err)
	}
	// The go command records the revision of a .git directory only (not of
	// a git worktree, whose .git is a file).
	if fi, err := os.Stat(filepath.Join(root, ".git")); err != nil || !fi.IsDir() {
		t.Skip("not built in a git checkout with a .git directory")
	}
	head, err := exec.Command("git", "-C", root, "rev-parse", "HEAD").Output()
	if err != nil {
		t.Skipf("git: %v", err)
	}
	exe := filepath.Join(t.TempDir(), "troupe")
	build := exec.Command("go", "build", "-buildvcs=true", "-o", exe, "./cmd/troupe")
	build.Dir = root
	if out, err := build.CombinedOutput(); err != nil {
		t.Fatalf("go build: %v\n%s", err, out)
	}
	out, err := exec.Command(exe, "--version").Output()
	if err != nil {
		t.Fatal(err)
	}
	if want := "\nrevision " + strings.TrimSpace(string(head)) + ", committed "; !strings.Contains(string(out), want) {
		t.Fatalf("troupe --version printed\n%s\nwant a line starting %q", out, want[1:])
	}
}
