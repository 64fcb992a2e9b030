package safetensors

import (
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"os"
	"slices"
)

// File is an open safetensors file: its validated header, and lazy access
// to tensor data through an io.ReaderAt. Its methods are safe for concurrent
// use when the underlying ReaderAt is (an *os.File is).
type File struct {
	Header
	// Size is the file size in bytes.
	Size int64

	r      io.ReaderAt
	closer io.Closer
}

// Read parses and validates the header of the size-byte file r. Tensor data
// is read later, on demand.
func Read(r io.ReaderAt, size int64) (*File, error) {
	if size < 8 {
		return nil, corrupt("file is %d bytes, shorter than the 8-byte header length", size)
	}
	var lenBuf [8]byte
	if err := readFull(r, lenBuf[:], 0); err != nil {
		return nil, err
	}
	n := binary.LittleEndian.Uint64(lenBuf[:])
	if n > MaxHeaderSize {
		return nil, fmt.Errorf("%w: header length %d is over the %d-byte limit", ErrHeaderTooLarge, n, MaxHeaderSize)
	}
	if int64(n) > size-8 {
		return nil, corrupt("header length %d runs past the end of the %d-byte file", n, size)
	}
	hdr := make([]byte, n)
	if err := readFull(r, hdr, 8); err != nil {
		return nil, err
	}
	h, err := parseHeader(hdr, size-8-int64(n))
	if err != nil {
		return nil, err
	}
	return &File{Header: *h, Size: size, r: r}, nil
}

// Open opens and validates the safetensors file at path. Close it when done.
func Open(path string) (*File, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	st, err := f.Stat()
	if err != nil {
		f.Close()
		return nil, err
	}
	sf, err := Read(f, st.Size())
	if err != nil {
		f.Close()
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	sf.closer = f
	return sf, nil
}

// Close releases the file opened by Open; it does nothing for Read's files.
func (f *File) Close() error {
	if f.closer == nil {
		return nil
	}
	err := f.closer.Close()
	f.closer = nil
	return err
}

func readFull(r io.ReaderAt, p []byte, off int64) error {
	n, err := r.ReadAt(p, off)
	if n == len(p) {
		return nil
	}
	if err == nil || errors.Is(err, io.EOF) {
		return corrupt("file truncated: read %d of %d bytes at offset %d", n, len(p), off)
	}
	return err
}

// Raw returns a fresh copy of the named tensor's bytes.
func (f *File) Raw(name string) ([]byte, error) {
	info, ok := f.Lookup(name)
	if !ok {
		return nil, fmt.Errorf("%w: %q", ErrNotFound, name)
	}
	b := make([]byte, info.Size())
	if err := readFull(f.r, b, info.Offset); err != nil {
		return nil, fmt.Errorf("tensor %q: %w", name, err)
	}
	return b, nil
}

// ReadRawAt reads len(p) bytes of the named tensor's data into p, starting
// off bytes into the tensor. Resharding a checkpoint reads row blocks this
// way without loading whole tensors.
func (f *File) ReadRawAt(name string, p []byte, off int64) error {
	info, ok := f.Lookup(name)
	if !ok {
		return fmt.Errorf("%w: %q", ErrNotFound, name)
	}
	if off < 0 || off > info.Size() || int64(len(p)) > info.Size()-off {
		return fmt.Errorf("%w: tensor %q: bytes [%d, %d) outside its %d bytes",
			ErrRange, name, off, off+int64(len(p)), info.Size())
	}
	if err := readFull(f.r, p, info.Offset+off); err != nil {
		return fmt.Errorf("tensor %q: %w", name, err)
	}
	return nil
}

// ReadTensor reads the named tensor.
func (f *File) ReadTensor(name string) (Tensor, error) {
	b, err := f.Raw(name)
	if err != nil {
		return Tensor{}, err
	}
	info, _ := f.Lookup(name)
	return Tensor{Name: name, DType: info.DType, Shape: slices.Clone(info.Shape), Data: b}, nil
}

// Float32 reads the named F32, F16, BF16 or F64 tensor as float32 values and
// returns them with the tensor's shape.
func (f *File) Float32(name string) ([]float32, []int, error) {
	t, err := f.ReadTensor(name)
	if err != nil {
		return nil, nil, err
	}
	v, err := t.Float32()
	return v, t.Shape, err
}

// Int64s reads the named integer tensor as int64 values (see Tensor.Int64s).
func (f *File) Int64s(name string) ([]int64, []int, error) {
	t, err := f.ReadTensor(name)
	if err != nil {
		return nil, nil, err
	}
	v, err := t.Int64s()
	return v, t.Shape, err
}

// Int32s reads the named integer tensor as int32 values, failing with
// ErrRange on a value outside int32 (see Tensor.Int32s).
func (f *File) Int32s(name string) ([]int32, []int, error) {
	t, err := f.ReadTensor(name)
	if err != nil {
		return nil, nil, err
	}
	v, err := t.Int32s()
	return v, t.Shape, err
}
