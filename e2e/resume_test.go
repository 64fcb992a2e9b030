package e2e

import (
	"strings"
	"testing"
	"time"

	"github.com/troupe-ml/troupe/e2e/e2etest"
)

// TestResumeNeedsNoModelFlags: a checkpoint records the model, data and
// training options, so --resume continues a run with none of them given;
// a model flag that differs is refused naming it; --resume=require fails
// without a checkpoint, --resume alone says it starts from step 0.
func TestResumeNeedsNoModelFlags(t *testing.T) {
	dir := t.TempDir()
	quiet := []string{"--threads", "1", "--log-format", "json"}
	first := append([]string{"train", "--model", "mlp", "--data", "synthetic-mlp:features=12,classes=3,n=64,test=16",
		"--layers", "12,8,3", "--batch", "8", "--steps", "6", "--ckpt-dir", dir, "--ckpt-every", "2", "--lr", "0.02"}, quiet...)
	e2etest.Troupe(t, time.Minute, append(first, "--json")...)

	out, stderr, err := e2etest.Run(t, time.Minute, e2etest.Bin, append([]string{"train", "--ckpt-dir", dir, "--resume", "--steps", "8", "--json"}, quiet...)...)
	if err != nil {
		t.Fatalf("resume without model flags: %v\n%s", err, stderr)
	}
	if !strings.Contains(out, `"model":"MLP 12-8-3,`) || !strings.Contains(out, `"start_step":6`) || !strings.Contains(out, `"steps":8`) {
		t.Fatalf("resumed summary: %s", out)
	}
	if !strings.Contains(stderr, `"msg":"resumed from the latest checkpoint"`) {
		t.Fatalf("the resume is not said:\n%s", stderr)
	}

	_, stderr, err = e2etest.Run(t, time.Minute, e2etest.Bin, append([]string{"train", "--ckpt-dir", dir, "--resume", "--layers", "12,16,3"}, quiet...)...)
	if code := e2etest.ExitStatus(t, err); code != 2 || !strings.Contains(e2etest.LastLine(stderr), "--layers 12,16,3 differs from the checkpoint's") {
		t.Fatalf("a conflicting model flag: exit %d, %q", code, e2etest.LastLine(stderr))
	}

	empty := t.TempDir()
	_, stderr, err = e2etest.Run(t, time.Minute, e2etest.Bin, append([]string{"train", "--ckpt-dir", empty, "--resume=require"}, quiet...)...)
	if code := e2etest.ExitStatus(t, err); code != 1 || !strings.Contains(e2etest.LastLine(stderr), "--resume=require found no checkpoint in "+empty) {
		t.Fatalf("--resume=require without a checkpoint: exit %d, %q", code, e2etest.LastLine(stderr))
	}
	_, stderr, err = e2etest.Run(t, time.Minute, e2etest.Bin, append([]string{"train", "--ckpt-dir", empty, "--resume", "--model", "mlp",
		"--data", "synthetic-mlp:features=12,classes=3,n=64,test=16", "--steps", "2"}, quiet...)...)
	if err != nil || !strings.Contains(stderr, `"msg":"not resumed: no checkpoint in the checkpoint directory, starting from step 0"`) {
		t.Fatalf("--resume without a checkpoint: %v\n%s", err, stderr)
	}
}
