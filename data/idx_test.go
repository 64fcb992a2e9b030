package data

import (
	"bytes"
	"compress/gzip"
	"encoding/binary"
	"errors"
	"slices"
	"strings"
	"testing"
)

// encodeIDX builds an unsigned-byte IDX file.
func encodeIDX(dims []int, data []byte) []byte {
	b := []byte{0, 0, 0x08, byte(len(dims))}
	for _, d := range dims {
		b = binary.BigEndian.AppendUint32(b, uint32(d))
	}
	return append(b, data...)
}

func gz(b []byte) []byte {
	var buf bytes.Buffer
	w := gzip.NewWriter(&buf)
	w.Write(b)
	w.Close()
	return buf.Bytes()
}

func TestDecodeIDX(t *testing.T) {
	data := []byte{1, 2, 3, 4, 5, 6}
	for name, file := range map[string][]byte{
		"raw":  encodeIDX([]int{2, 3}, data),
		"gzip": gz(encodeIDX([]int{2, 3}, data)),
	} {
		m, err := DecodeIDX(bytes.NewReader(file))
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		if !slices.Equal(m.Dims, []int{2, 3}) || !bytes.Equal(m.Data, data) {
			t.Errorf("%s: got %v %v", name, m.Dims, m.Data)
		}
	}
	if m, err := DecodeIDX(bytes.NewReader(encodeIDX([]int{0}, nil))); err != nil || len(m.Data) != 0 {
		t.Errorf("empty IDX: %v %v", m, err)
	}
}

func TestDecodeIDXErrors(t *testing.T) {
	corrupted := gz(encodeIDX([]int{4}, []byte{1, 2, 3, 4}))
	corrupted[len(corrupted)-6] ^= 0xff // flip a CRC32 byte of the gzip trailer
	cases := []struct {
		name, mention string
		file          []byte
	}{
		{"empty", "truncated header", nil},
		{"bad magic", "two zero bytes", []byte{1, 0, 8, 1, 0, 0, 0, 0}},
		{"float type", "0x0d (float32)", []byte{0, 0, 0x0d, 1, 0, 0, 0, 0}},
		{"unknown type", "unknown", []byte{0, 0, 0x42, 1, 0, 0, 0, 0}},
		{"no dims", "0 dimensions", []byte{0, 0, 8, 0}},
		{"too many dims", "9 dimensions", []byte{0, 0, 8, 9}},
		{"truncated dims", "truncated dimensions", []byte{0, 0, 8, 2, 0, 0, 0, 1}},
		{"truncated data", "2 of 6 data bytes", encodeIDX([]int{2, 3}, []byte{1, 2})},
		{"trailing data", "continues past", encodeIDX([]int{1}, []byte{1, 2})},
		{"huge dims", "too many elements", encodeIDX([]int{1 << 31, 1 << 31, 1 << 31}, nil)},
		{"bad gzip", "gzip", []byte{0x1f, 0x8b, 0, 0}},
		{"gzip checksum", "gzip", corrupted},
	}
	for _, c := range cases {
		_, err := DecodeIDX(bytes.NewReader(c.file))
		if !errors.Is(err, ErrFormat) || !strings.Contains(err.Error(), c.mention) {
			t.Errorf("%s: error %v, want ErrFormat mentioning %q", c.name, err, c.mention)
		}
	}
}

// FuzzDecodeIDX: no input may panic or make the decoder allocate beyond
// what it holds; what decodes must be consistent with its dimensions.
func FuzzDecodeIDX(f *testing.F) {
	f.Add(encodeIDX([]int{2, 2, 2}, make([]byte, 8)))
	f.Add(encodeIDX([]int{3}, []byte{1, 2, 3}))
	f.Add(gz(encodeIDX([]int{2, 3}, []byte{1, 2, 3, 4, 5, 6})))
	f.Add(encodeIDX([]int{1 << 30, 4}, []byte{1}))
	f.Add([]byte{0, 0, 8, 1})
	f.Fuzz(func(t *testing.T, b []byte) {
		m, err := DecodeIDX(bytes.NewReader(b))
		if err != nil {
			if !errors.Is(err, ErrFormat) {
				t.Fatalf("error %v does not wrap ErrFormat", err)
			}
			return
		}
		n := 1
		for _, d := range m.Dims {
			n *= d
		}
		if n != len(m.Data) {
			t.Fatalf("dims %v hold %d bytes, data has %d", m.Dims, n, len(m.Data))
		}
	})
}
