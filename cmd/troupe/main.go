// Command troupe trains neural networks on actors: one process or many,
// elastic and fault-tolerant. See README.md for every sub-command; the
// command line itself is package cli, which a Go program with models of
// its own runs the same way.
package main

import "github.com/troupe-ml/troupe/cli"

func main() { cli.Main() }
