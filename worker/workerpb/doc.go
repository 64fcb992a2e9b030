// Package workerpb holds the protobuf wire messages of troupe's worker
// actor (package worker). The generated code is committed, so building
// troupe needs neither protoc nor protoc-gen-go; `go generate` remakes it
// (protoc 3.21 from Debian's protobuf-compiler, protoc-gen-go v1.36.12
// from the Go module proxy).
package workerpb

//go:generate protoc --go_out=. --go_opt=paths=source_relative worker.proto
