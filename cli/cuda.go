//go:build cuda

package cli

// Built with -tags cuda, troupe registers the GPU backend: `troupe devices`
// lists the GPUs and `troupe train --device cuda` trains on them. Such a
// binary needs the NVIDIA driver to start (see kernels/cuda).
import _ "github.com/troupe-ml/troupe/kernels/cuda"
