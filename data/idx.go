package data

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"encoding/binary"
	"errors"
	"fmt"
	"io"
	"math"
	"math/bits"
	"os"
)

// IDX is a decoded IDX file (the format MNIST ships in): an unsigned-byte
// array of shape Dims, row-major.
type IDX struct {
	Dims []int
	Data []byte
}

// maxIDXDims bounds the dimension count; real files have 1 (labels) or 3
// (images).
const maxIDXDims = 8

// idxTypes names the element types of the IDX format, for error messages.
var idxTypes = map[byte]string{
	0x08: "unsigned byte", 0x09: "signed byte", 0x0b: "int16",
	0x0c: "int32", 0x0d: "float32", 0x0e: "float64",
}

// DecodeIDX decodes an IDX file of unsigned bytes, gzip-compressed or not
// (detected from the gzip magic number, not the file name). The header is
// two zero bytes, the element type (0x08), the number of dimensions and one
// big-endian uint32 per dimension; the data must be exactly the product of
// the dimensions in bytes, with nothing after it.
func DecodeIDX(r io.Reader) (*IDX, error) {
	br := bufio.NewReader(r)
	if magic, _ := br.Peek(2); len(magic) == 2 && magic[0] == 0x1f && magic[1] == 0x8b {
		zr, err := gzip.NewReader(br)
		if err != nil {
			return nil, fmt.Errorf("%w: IDX: bad gzip header: %v", ErrFormat, err)
		}
		defer zr.Close()
		br = bufio.NewReader(zr)
	}
	var hdr [4]byte
	if _, err := io.ReadFull(br, hdr[:]); err != nil {
		return nil, idxReadErr("header", err)
	}
	if hdr[0] != 0 || hdr[1] != 0 {
		return nil, fmt.Errorf("%w: IDX: magic number %#08x does not start with two zero bytes",
			ErrFormat, binary.BigEndian.Uint32(hdr[:]))
	}
	if hdr[2] != 0x08 {
		name, ok := idxTypes[hdr[2]]
		if !ok {
			name = "unknown"
		}
		return nil, fmt.Errorf("%w: IDX: element type %#02x (%s) not supported, only unsigned byte (0x08)",
			ErrFormat, hdr[2], name)
	}
	nd := int(hdr[3])
	if nd < 1 || nd > maxIDXDims {
		return nil, fmt.Errorf("%w: IDX: %d dimensions, want 1 to %d", ErrFormat, nd, maxIDXDims)
	}
	dimBuf := make([]byte, 4*nd)
	if _, err := io.ReadFull(br, dimBuf); err != nil {
		return nil, idxReadErr("dimensions", err)
	}
	m := &IDX{Dims: make([]int, nd)}
	total := uint64(1)
	for i := range m.Dims {
		d := binary.BigEndian.Uint32(dimBuf[4*i:])
		hi, lo := bits.Mul64(total, uint64(d))
		if hi != 0 || lo > math.MaxInt32*1024 {
			return nil, fmt.Errorf("%w: IDX: dimensions %v… hold too many elements", ErrFormat, m.Dims[:i+1])
		}
		total = lo
		m.Dims[i] = int(d)
	}
	// Read through a limit rather than allocating total bytes up front, so
	// a header that lies about its size costs only what the input holds.
	var buf bytes.Buffer
	buf.Grow(int(min(total, 1<<20)))
	if _, err := buf.ReadFrom(io.LimitReader(br, int64(total))); err != nil {
		return nil, idxReadErr("data", err)
	}
	if uint64(buf.Len()) != total {
		return nil, fmt.Errorf("%w: IDX: truncated: %d of %d data bytes for dimensions %v",
			ErrFormat, buf.Len(), total, m.Dims)
	}
	// Reading to EOF also makes gzip verify its checksum.
	var one [1]byte
	switch n, err := io.ReadFull(br, one[:]); {
	case n > 0:
		return nil, fmt.Errorf("%w: IDX: data continues past the %d bytes dimensions %v hold", ErrFormat, total, m.Dims)
	case err != nil && !errors.Is(err, io.EOF):
		return nil, idxReadErr("data", err)
	}
	m.Data = buf.Bytes()
	return m, nil
}

func idxReadErr(what string, err error) error {
	if errors.Is(err, io.EOF) || errors.Is(err, io.ErrUnexpectedEOF) {
		return fmt.Errorf("%w: IDX: truncated %s", ErrFormat, what)
	}
	if errors.Is(err, gzip.ErrChecksum) || errors.Is(err, gzip.ErrHeader) {
		return fmt.Errorf("%w: IDX: corrupt gzip stream in %s: %v", ErrFormat, what, err)
	}
	return fmt.Errorf("%w: IDX: reading %s: %v", ErrFormat, what, err)
}

// ReadIDXFile decodes the IDX file at path (gzip-compressed or not).
func ReadIDXFile(path string) (*IDX, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	m, err := DecodeIDX(f)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	return m, nil
}
