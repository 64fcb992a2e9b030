// Package safetensors reads and writes the Hugging Face safetensors format, the
// tensor file format that PyTorch, JAX and the `safetensors` Python library
// exchange weights in. troupe uses it for checkpoint shards, for --init files
// and for datasets stored as tensors.
//
// # Format
//
// A file is an 8-byte little-endian unsigned header length N, then N bytes of
// UTF-8 JSON, then the data buffer:
//
//	{"__metadata__": {"k": "v"},
//	 "w": {"dtype": "F32", "shape": [2, 3], "data_offsets": [0, 24]}, ...}
//
// data_offsets are [begin, end) byte positions relative to the start of the
// data buffer (file offset 8+N). Tensors are stored row-major, little-endian.
// The buffer must be covered exactly: no holes, no overlaps, nothing after the
// last tensor. Read enforces all of this and rejects anything else with an
// error that wraps one of the sentinel errors in errors.go and names the
// offending tensor.
//
// # Reading
//
// Read (or Open) validates the header and keeps an io.ReaderAt; tensor data
// is read on demand: Raw and ReadTensor copy a whole tensor, ReadRawAt a
// byte range of one, and Float32, Int64s, Int32s convert as described below.
// TensorInfo.Offset is each tensor's absolute file offset.
//
// # Writing
//
// Write lays tensors out the way the Rust/Python library does, so files are
// byte-identical to `safetensors.torch.save_file` for the same tensors and no
// metadata: tensors are ordered by dtype (widest first, in the library's dtype
// order) and then by name, which keeps every tensor aligned to its element size
// because the header is padded with spaces to a multiple of 8 bytes. The JSON
// header lists "__metadata__" first (keys sorted) and then the tensors in data
// order. Layout computes the same placement without writing, which is what a
// checkpoint manifest needs to record each tensor's file offset.
//
// WriteFile writes atomically: a temporary file in the target directory,
// fsync, rename, fsync of the directory.
//
// # Dtypes
//
// Every whole-byte dtype of the format is read as raw bytes: BOOL, U8, I8,
// F8_E5M2, F8_E4M3, I16, U16, F16, BF16, I32, U32, F32, F64, I64, U64. The
// sub-byte dtypes (F4, F6_*) and F8_E8M0 are rejected as unknown. File.Float32
// converts F16, BF16, F32 and F64 to float32; File.Int64s and File.Int32s
// convert every integer dtype, with range checks. The float32 to F16/BF16
// encoders round to nearest even and keep NaN, infinities and subnormals exact.
//
// This package is a leaf: it imports nothing from troupe.
package safetensors
