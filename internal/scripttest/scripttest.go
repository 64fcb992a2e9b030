// Package scripttest runs interaction scripts in the style of etcd's raft
// interaction tests: files of blocks, each a command, a "----" line and
// the output it must print (up to a blank line); lines starting with #
// are comments. A failing block can be replayed by hand, command by
// command. Run the tests with -rewrite to rewrite the scripts with the
// current output after a deliberate change, and read the diff.
package scripttest

import (
	"bufio"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

var rewrite = flag.Bool("rewrite", false, "rewrite the interaction scripts with the current output")

// Sim is what a script drives: Exec runs one command and returns what it
// printed, and, when an invariant broke, which (the test then stops).
type Sim interface {
	Exec(cmd string) (out string, violation error)
}

// Run runs every script that glob matches as a subtest, each on a fresh
// Sim from newSim.
func Run(t *testing.T, glob string, newSim func() Sim) {
	t.Helper()
	files, err := filepath.Glob(glob)
	if err != nil || len(files) == 0 {
		t.Fatalf("no scripts match %s: %v", glob, err)
	}
	for _, f := range files {
		t.Run(strings.TrimSuffix(filepath.Base(f), ".txt"), func(t *testing.T) { runFile(t, f, newSim()) })
	}
}

type block struct {
	comments []string
	cmd      string
	want     string
}

func parse(t *testing.T, path string) []block {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	var blocks []block
	var cur block
	var out []string
	inOut := false
	sc := bufio.NewScanner(f)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case inOut && line == "":
			cur.want = strings.Join(out, "\n")
			blocks = append(blocks, cur)
			cur, out, inOut = block{}, nil, false
		case inOut:
			out = append(out, line)
		case line == "----":
			if cur.cmd == "" {
				t.Fatalf("%s: ---- without a command", path)
			}
			inOut = true
		case strings.HasPrefix(line, "#") || line == "":
			cur.comments = append(cur.comments, line)
		default:
			if cur.cmd != "" {
				t.Fatalf("%s: command %q has no ---- line", path, cur.cmd)
			}
			cur.cmd = line
		}
	}
	if inOut {
		cur.want = strings.Join(out, "\n")
		blocks = append(blocks, cur)
	}
	return blocks
}

func runFile(t *testing.T, path string, sim Sim) {
	var rewritten strings.Builder
	for _, b := range parse(t, path) {
		out, violation := sim.Exec(b.cmd)
		if violation != nil {
			t.Fatalf("%s: %s: invariant violated: %v\noutput:\n%s", path, b.cmd, violation, out)
		}
		got := strings.TrimRight(out, "\n")
		if got == "" {
			got = "ok"
		}
		if *rewrite {
			for _, c := range b.comments {
				fmt.Fprintln(&rewritten, c)
			}
			fmt.Fprintf(&rewritten, "%s\n----\n%s\n\n", b.cmd, got)
			continue
		}
		if got != b.want {
			t.Errorf("%s: %s\ngot:\n%s\nwant:\n%s", path, b.cmd, got, b.want)
		}
	}
	if *rewrite {
		if err := os.WriteFile(path, []byte(strings.TrimRight(rewritten.String(), "\n")+"\n"), 0o644); err != nil {
			t.Fatal(err)
		}
	}
}
