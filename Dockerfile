# troupe as a static binary in a distroless image, run as a non-root user.
#   docker build -t troupe:dev .
#   docker run --rm troupe:dev train --steps 20
# The build command below is the one e2e's TestDockerfileBuildsAStaticBinary
# runs: keep them the same.
FROM golang:1.26 AS build
WORKDIR /src
COPY go.mod go.sum ./
RUN go mod download
COPY . .
RUN CGO_ENABLED=0 go build -trimpath -ldflags=-s -o /out/troupe ./cmd/troupe

FROM gcr.io/distroless/static-debian12:nonroot
COPY --from=build /out/troupe /usr/local/bin/troupe
USER 65532:65532
ENTRYPOINT ["/usr/local/bin/troupe"]
