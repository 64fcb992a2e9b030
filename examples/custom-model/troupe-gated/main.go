// Command troupe-gated is troupe's own command line with the example's
// model registered: every sub-command of troupe, and --model gated-mlp
// among the models (its flags --hidden and --depth from the model's
// options), in one process or in worker processes (--procs, agents),
// which run this same executable.
//
//	go run ./examples/custom-model/troupe-gated train --model gated-mlp --data synthetic-mlp --dp 2 --steps 100
//	go run ./examples/custom-model/troupe-gated train --help
package main

import (
	"github.com/troupe-ml/troupe/cli"
	_ "github.com/troupe-ml/troupe/examples/custom-model/gated" // registers "gated-mlp"
)

func main() { cli.Main() }
