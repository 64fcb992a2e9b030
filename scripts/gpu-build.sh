#!/usr/bin/env bash
# gpu-build.sh: builds, on a machine with Go and the CUDA headers, what
# scripts/gpu-check.sh runs on a GPU machine that has neither Go nor a
# network: the CUDA backend's test binary, troupe built with -tags cuda, and
# the training text (the Go specification from this Go installation, laid
# out as a GOROOT so that --data gospec finds it).
#
# Needs: Debian's contrib/non-free nvidia-cuda-dev and libcuda1 (the headers
# and the driver library gorgonia.org/cu compiles and links against; see
# docs/CUDA.md). The binaries link only libcuda.so.1, which the GPU
# machine's driver provides.
#
# Usage: scripts/gpu-build.sh            (writes bin/)
set -euo pipefail
cd "$(dirname "$0")/.."

if [ ! -f /usr/include/cuda.h ]; then
	echo "gpu-build: /usr/include/cuda.h missing: apt-get install nvidia-cuda-dev libcuda1 (contrib non-free), see docs/CUDA.md" >&2
	exit 1
fi
mkdir -p bin/goroot/doc
go test -c -tags cuda -o bin/cuda.test ./kernels/cuda
go build -tags cuda -o bin/troupe-cuda ./cmd/troupe
cp "$(go env GOROOT)/doc/go_spec.html" bin/goroot/doc/go_spec.html
ls -l bin/cuda.test bin/troupe-cuda bin/goroot/doc/go_spec.html
