package generate_test

import (
	"context"
	"fmt"
	"log"

	"github.com/troupe-ml/troupe/generate"
	"github.com/troupe-ml/troupe/kernels/cpu"
	"github.com/troupe-ml/troupe/models"
)

// A GPT's weights, written by troupe train --save or PyTorch, continue a
// prompt of token ids: greedily, then sampled with a seed.
func ExampleGenerate() {
	spec := models.GPT{Vocab: 65, Context: 64, DModel: 128, Layers: 4, Heads: 4}
	m, err := generate.Load(cpu.New(0), spec, "gpt.safetensors")
	if err != nil {
		log.Fatal(err)
	}
	prompt := []int32{20, 43, 50, 50, 53}
	greedy, err := generate.Generate(context.Background(), m, prompt, generate.Options{MaxNewTokens: 20})
	if err != nil {
		log.Fatal(err)
	}
	o := generate.DefaultOptions()
	o.MaxNewTokens, o.Temperature, o.TopK, o.Seed = 20, 0.8, 10, 42
	sampled, err := generate.Generate(context.Background(), m, prompt, o)
	if err != nil {
		log.Fatal(err)
	}
	fmt.Println(greedy, sampled)
}
