package e2e

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/troupe-ml/troupe/e2e/e2etest"
)

// numpyShards writes a corpus of llm.c shards with numpy, as llm.c's
// write_datafile does: two train shards and one val shard of ids below 97.
func numpyShards(t *testing.T) string {
	t.Helper()
	py := numpyPython()
	if py == "" {
		t.Skip("no python3 with numpy")
	}
	dir := filepath.Join(t.TempDir(), "np")
	os.MkdirAll(dir, 0o755)
	script := `
import numpy as np, sys
d = sys.argv[1]
rng = np.random.default_rng(7)
def write(name, n):
    # A learnable stream: mostly the previous id + 1, sometimes random.
    toks = np.cumsum(np.where(rng.random(n) < 0.9, 1, rng.integers(2, 50, n))) % 97
    h = np.zeros(256, dtype=np.int32)
    h[0], h[1], h[2] = 20240520, 1, n
    with open(d + "/" + name, "wb") as f:
        f.write(h.tobytes())
        f.write(toks.astype(np.uint16).tobytes())
write("np_train_000000.bin", 3000)
write("np_train_000001.bin", 2500)
write("np_val_000000.bin", 600)
`
	if out, err := exec.Command(py, "-c", script, dir).CombinedOutput(); err != nil {
		if strings.Contains(string(out), "No module named") {
			t.Skip("python3 has no numpy")
		}
		t.Fatalf("numpy: %v\n%s", err, out)
	}
	return dir
}

var shardGPT = []string{"--model", "gpt", "--d-model", "32", "--n-layers", "1", "--n-heads", "2", "--context", "16",
	"--batch", "8", "--lr", "3e-3", "--threads", "1", "--log-format", "json"}

// Shards written by numpy in llm.c's format train the GPT (the loss
// falls, the held-out loss comes from the val shard), in one worker and
// two; and a run stopped at a checkpoint resumes at the same token: the
// same cursors and losses as a run never stopped.
func TestNumpyShardsTrainGPT(t *testing.T) {
	dir := numpyShards(t)
	read := func(path string) []stepLine { return readStepLines(t, path) }
	ref := learnsShards(t, "GPT", append([]string{"train", "--data", dir, "--vocab-size", "128", "--steps", "40"}, shardGPT...))

	dp := filepath.Join(t.TempDir(), "dp.jsonl")
	e2etest.Troupe(t, 2*time.Minute, append([]string{"train", "--data", dir, "--vocab-size", "128", "--steps", "40", "--dp", "2",
		"--metrics-out", dp}, shardGPT...)...)
	for i, r := range read(dp) {
		if r.Cursor != ref[i].Cursor || abs(r.Loss-ref[i].Loss) > 1e-4*ref[i].Loss {
			t.Fatalf("dp 2 step %d: cursor %d loss %v, one worker %d %v", r.Step, r.Cursor, r.Loss, ref[i].Cursor, ref[i].Loss)
		}
	}

	ck := t.TempDir()
	first := filepath.Join(t.TempDir(), "a.jsonl")
	e2etest.Troupe(t, 2*time.Minute, append([]string{"train", "--data", dir, "--vocab-size", "128", "--steps", "20",
		"--ckpt-dir", ck, "--ckpt-every", "20", "--metrics-out", first}, shardGPT...)...)
	second := filepath.Join(t.TempDir(), "b.jsonl")
	e2etest.Troupe(t, 2*time.Minute, "train", "--ckpt-dir", ck, "--resume=require", "--steps", "40", "--threads", "1",
		"--log-format", "json", "--metrics-out", second)
	got := append(read(first), read(second)...)
	if len(got) != len(ref) {
		t.Fatalf("stopped and resumed: %d steps, want %d", len(got), len(ref))
	}
	for i, r := range got {
		if r.Step != ref[i].Step || r.Cursor != ref[i].Cursor || r.Loss != ref[i].Loss {
			t.Fatalf("resumed run step %d: cursor %d loss %v, unstopped %d %v", r.Step, r.Cursor, r.Loss, ref[i].Cursor, ref[i].Loss)
		}
	}
}

// The same numpy shards train the Llama (the loss falls, the held-out loss
// comes from the val shard), and two tensor-parallel shards read the same
// tokens and give the losses of one worker (rel 1e-4: the TP cut reorders
// the sums of the row-parallel projections).
func TestNumpyShardsTrainLlama(t *testing.T) {
	dir := numpyShards(t)
	llama := []string{"train", "--model", "llama", "--data", dir, "--vocab-size", "128", "--d-model", "32", "--n-layers", "1",
		"--n-heads", "2", "--n-kv-heads", "2", "--ffn-hidden", "64", "--context", "16", "--batch", "8", "--lr", "3e-3",
		"--steps", "40", "--threads", "1", "--log-format", "json"}
	read := func(path string) []stepLine { return readStepLines(t, path) }
	ref := learnsShards(t, "Llama", llama)
	tp := filepath.Join(t.TempDir(), "tp.jsonl")
	e2etest.Troupe(t, 2*time.Minute, append(llama, "--tp", "2", "--metrics-out", tp)...)
	got := read(tp)
	if len(got) != len(ref) {
		t.Fatalf("tp 2: %d steps, one worker %d", len(got), len(ref))
	}
	for i, r := range got {
		if r.Cursor != ref[i].Cursor || abs(r.Loss-ref[i].Loss) > 1e-4*ref[i].Loss {
			t.Fatalf("tp 2 step %d: cursor %d loss %v, one worker %d %v", r.Step, r.Cursor, r.Loss, ref[i].Cursor, ref[i].Loss)
		}
	}
}

// learnsShards runs troupe train with args: its loss must fall by more
// than 0.5 and it must report a held-out loss (the val shard). It returns
// the run's metrics lines.
func learnsShards(t *testing.T, model string, args []string) []stepLine {
	t.Helper()
	m := filepath.Join(t.TempDir(), "m.jsonl")
	out := e2etest.Troupe(t, 2*time.Minute, append(args, "--metrics-out", m, "--json")...)
	var sum struct {
		FirstLoss float64 `json:"first_loss"`
		FinalLoss float64 `json:"final_loss"`
		EvalLoss  float64 `json:"eval_loss"`
	}
	if err := json.Unmarshal([]byte(e2etest.LastLine(out)), &sum); err != nil {
		t.Fatalf("%v: %s", err, out)
	}
	if !(sum.FinalLoss < sum.FirstLoss-0.5) || !(sum.EvalLoss > 0) {
		t.Fatalf("the %s did not learn the shards: %+v", model, sum)
	}
	t.Logf("the %s on numpy shards: loss %.3f -> %.3f, held-out %.3f", model, sum.FirstLoss, sum.FinalLoss, sum.EvalLoss)
	return readStepLines(t, m)
}

// stepLine is what the shard tests read of a metrics line.
type stepLine struct {
	Step   int     `json:"step"`
	Loss   float64 `json:"loss"`
	Cursor uint64  `json:"cursor"`
}

// readStepLines reads a --metrics-out file.
func readStepLines(t *testing.T, path string) []stepLine {
	t.Helper()
	var out []stepLine
	for _, l := range strings.Split(strings.TrimSpace(e2etest.ReadFile(t, path)), "\n") {
		var r stepLine
		if err := json.Unmarshal([]byte(l), &r); err != nil {
			t.Fatalf("%s: %v", path, err)
		}
		out = append(out, r)
	}
	return out
}

func abs(x float64) float64 {
	if x < 0 {
		return -x
	}
	return x
}

// troupe data prepare tokenizes the Go spec into shards that troupe train
// reads; bad input exits 2 (the command line) or 1 (the data), naming the
// file.
func TestDataPrepareCLI(t *testing.T) {
	dir := t.TempDir()
	in := filepath.Join(dir, "spec.html")
	os.WriteFile(in, []byte(goSpec(t)), 0o644)
	out := filepath.Join(dir, "spec")
	doc := e2etest.Troupe(t, time.Minute, "data", "prepare", "--tokenizer", "gpt2", "--out", out, "--shard-tokens", "50000", "--json", in)
	var s struct {
		Out         string   `json:"out"`
		Tokenizer   string   `json:"tokenizer"`
		VocabSize   int      `json:"vocab_size"`
		TrainTokens int64    `json:"train_tokens"`
		ValTokens   int64    `json:"val_tokens"`
		TrainShards []string `json:"train_shards"`
	}
	if err := json.Unmarshal([]byte(doc), &s); err != nil {
		t.Fatalf("%v: %q", err, doc)
	}
	if s.Out != out || s.Tokenizer != "gpt2" || s.VocabSize != 50257 || len(s.TrainShards) != 2 || s.ValTokens == 0 {
		t.Fatalf("summary %+v", s)
	}
	sum := e2etest.Troupe(t, 2*time.Minute, "train", "--model", "gpt", "--data", out, "--d-model", "32", "--n-layers", "1",
		"--context", "32", "--batch", "4", "--steps", "2", "--eval-batches", "2", "--threads", "1", "--json")
	if !strings.Contains(sum, `"data":"spec/train"`) || !strings.Contains(sum, `"eval_loss"`) {
		t.Fatalf("training on the prepared corpus: %s", sum)
	}

	bad := filepath.Join(dir, "bad")
	os.MkdirAll(bad, 0o755)
	os.WriteFile(filepath.Join(bad, "x_train_000000.bin"), make([]byte, 2048), 0o644)
	jsonl := filepath.Join(dir, "docs.jsonl")
	os.WriteFile(jsonl, []byte("{\"text\":\"a\"}\nnot json\n"), 0o644)
	for _, c := range []struct {
		args []string
		code int
		want string
	}{
		{[]string{"train", "--model", "gpt", "--data", bad}, 1, "x_train_000000.bin: bad magic 0"},
		{[]string{"train", "--model", "gpt", "--data", out, "--context", "40000"}, 1, "fewer than context+1"},
		{[]string{"train", "--model", "gpt", "--data", out, "--vocab-size", "1000"}, 1, "smaller than the 50257"},
		{[]string{"data", "prepare", "--out", filepath.Join(dir, "o1"), jsonl}, 1, "docs.jsonl line 2"},
		{[]string{"data", "prepare", "--tokenizer", "wordpiece", "--out", filepath.Join(dir, "o2"), in}, 2, "wordpiece"},
		{[]string{"data", "prepare", "--out", out, in}, 2, "holds shards"},
		{[]string{"data", "prepare", in}, 2, "--out"},
	} {
		stdout, stderr, err := e2etest.Run(t, time.Minute, e2etest.Bin, c.args...)
		if code := e2etest.ExitStatus(t, err); code != c.code || !strings.Contains(stderr, c.want) || strings.TrimSpace(stdout) != "" {
			t.Errorf("troupe %v: exit %d, stderr %q; want %d naming %q", c.args, code, e2etest.LastLine(stderr), c.code, c.want)
		}
	}
}

// numpyPython is a python3 that has numpy: Debian's (/usr/bin/python3,
// with python3-numpy) before the one on PATH, which may be another.
func numpyPython() string {
	for _, p := range []string{"/usr/bin/python3", "python3"} {
		if path, err := exec.LookPath(p); err == nil && exec.Command(path, "-c", "import numpy").Run() == nil {
			return path
		}
	}
	return ""
}
