package e2e

import (
	"encoding/json"

	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/troupe-ml/troupe/e2e/e2etest"
)

// TestGenerateGreedyMatchesPyTorch: troupe generate --temperature 0, from
// weights PyTorch wrote, prints the ids of PyTorch's full-recompute greedy
// decoding (the whole sequence through the model at every step) for
// prompts of 1 to 7 tokens, with a tied and an untied head. The weights
// are drawn wide (N(0, 1) added to PyTorch's init) so that the outputs vary
// with the prompt; the test also requires every step's top two logits in
// PyTorch to differ by more than 1e-3, far above the float32 difference of
// the two implementations (~1e-5 of the logits), so that equal ids are a
// real agreement and not a coin toss between near-ties.
func TestGenerateGreedyMatchesPyTorch(t *testing.T) {
	needTorch(t)
	dir := t.TempDir()
	shape := []string{"--vocab", "17", "--d-model", "32", "--n-layers", "2", "--n-heads", "4", "--context", "16"}
	for _, head := range []struct {
		name  string
		flags []string
	}{{"tied", nil}, {"untied", []string{"--untied"}}} {
		t.Run(head.name, func(t *testing.T) {
			init := filepath.Join(dir, head.name+".safetensors")
			torchGenerate(t, append(append([]string{"init", "--out", init, "--std", "1", "--seed", "2"}, shape...), head.flags...)...)
			prompts := []string{"1,2,3", "16", "5,9,0,11,4,4,13", "8,8"}
			ref := strings.Split(strings.TrimSpace(torchGenerate(t, append(append([]string{"greedy", "--init", init,
				"--prompt-ids", strings.Join(prompts, ";"), "--max-new-tokens", "8"}, shape...), head.flags...)...)), "\n")
			if len(ref) != len(prompts) {
				t.Fatalf("PyTorch decoded %d prompts of %d", len(ref), len(prompts))
			}
			var all [][]int32
			for i, prompt := range prompts {
				var want struct {
					IDs    []int32 `json:"ids"`
					Margin float64 `json:"margin"`
				}
				if err := json.Unmarshal([]byte(ref[i]), &want); err != nil {
					t.Fatalf("%v in %q", err, ref[i])
				}
				if want.Margin <= 1e-3 {
					t.Fatalf("prompt %s: PyTorch's top two logits are %g apart at some step: too close to compare", prompt, want.Margin)
				}
				args := append([]string{"generate", "--data", "synthetic-tokens:vocab=17", "--d-model", "32", "--n-layers", "2",
					"--n-heads", "4", "--context", "16", "--init", init, "--prompt-ids", prompt, "--max-new-tokens", "8",
					"--temperature", "0", "--json"}, head.flags...)
				var got struct {
					IDs []int32 `json:"ids"`
				}
				out := e2etest.Troupe(t, 2*time.Minute, args...)
				if err := json.Unmarshal([]byte(out), &got); err != nil {
					t.Fatalf("%v in %q", err, out)
				}
				if !slices.Equal(got.IDs, want.IDs) {
					t.Errorf("prompt %s: troupe generate %v, PyTorch %v", prompt, got.IDs, want.IDs)
				}
				all = append(all, got.IDs)
			}
			if slices.EqualFunc(all[1:], all[:len(all)-1], slices.Equal) {
				t.Errorf("every prompt gave %v: the comparison cannot tell a wrong decoder", all[0])
			}
		})
	}
}

func torchGenerate(t *testing.T, args ...string) string {
	t.Helper()
	out, errs, err := e2etest.Run(t, 2*time.Minute, python, append([]string{"../scripts/torch_generate.py"}, args...)...)
	if err != nil {
		t.Fatalf("torch_generate.py %v: %v\n%s", args, err, errs)
	}
	return out
}
