// Package elasticpb holds the protobuf wire messages of troupe's elastic
// layer. The generated code is committed, so building troupe needs neither
// protoc nor protoc-gen-go; `go generate` remakes it (protoc 3.21 from
// Debian's protobuf-compiler, protoc-gen-go v1.36.12 from the Go module
// proxy).
package elasticpb
