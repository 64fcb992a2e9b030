package safetensors

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strconv"
	"unicode/utf8"
)

// MaxHeaderSize is the largest header length accepted on read, the same
// limit as the Rust library (100 MB): a length field above it is a corrupt
// or hostile file, not a real model.
const MaxHeaderSize = 100_000_000

// metadataKey is the reserved header key for the string-to-string map.
const metadataKey = "__metadata__"

// TensorInfo describes one tensor of a file without its data.
type TensorInfo struct {
	Name  string
	DType DType
	Shape []int
	// Begin and End are the header's data_offsets: [Begin, End) relative to
	// the start of the data buffer.
	Begin, End int64
	// Offset is the file offset of the tensor's first byte: 8 + header
	// length + Begin. A checkpoint manifest records it so a reader can seek
	// straight to the tensor.
	Offset int64
}

// Size returns the tensor's size in bytes.
func (t TensorInfo) Size() int64 { return t.End - t.Begin }

// Header is the parsed header of a file, or the layout Write will produce.
type Header struct {
	// Tensors in header order: the order of the JSON keys on read (for
	// files this package writes, that is also data order).
	Tensors []TensorInfo
	// Metadata is the "__metadata__" map; nil when the file has none.
	Metadata map[string]string
	// Len is N, the JSON header length in bytes including padding.
	Len int64

	index map[string]int
}

// DataStart returns the file offset of the data buffer (8 + Len).
func (h *Header) DataStart() int64 { return 8 + h.Len }

// Names returns the tensor names in header order.
func (h *Header) Names() []string {
	names := make([]string, len(h.Tensors))
	for i, t := range h.Tensors {
		names[i] = t.Name
	}
	return names
}

// Lookup returns the tensor called name.
func (h *Header) Lookup(name string) (TensorInfo, bool) {
	i, ok := h.index[name]
	if !ok {
		return TensorInfo{}, false
	}
	return h.Tensors[i], true
}

func (h *Header) buildIndex() {
	h.index = make(map[string]int, len(h.Tensors))
	for i, t := range h.Tensors {
		h.index[t.Name] = i
	}
}

// rawTensor is a header entry as it appears in JSON. Numbers are kept as
// text so that negative, fractional or huge values get our own error message
// instead of a generic unmarshal error.
type rawTensor struct {
	DType       *string       `json:"dtype"`
	Shape       []json.Number `json:"shape"`
	DataOffsets []json.Number `json:"data_offsets"`
}

func corrupt(format string, args ...any) error {
	return fmt.Errorf("%w: "+format, append([]any{ErrCorrupt}, args...)...)
}

// parseHeader decodes and validates the JSON header hdr (N bytes, padding
// included) of a file whose data buffer is bufLen bytes long.
func parseHeader(hdr []byte, bufLen int64) (*Header, error) {
	if !utf8.Valid(hdr) {
		return nil, corrupt("header is not valid UTF-8")
	}
	if len(hdr) == 0 || hdr[0] != '{' {
		return nil, corrupt("header does not start with '{'")
	}
	dec := json.NewDecoder(bytes.NewReader(hdr))
	dec.UseNumber()
	dec.DisallowUnknownFields()
	if _, err := dec.Token(); err != nil {
		return nil, corrupt("header JSON: %v", err)
	}
	h := &Header{Len: int64(len(hdr)), index: map[string]int{}}
	seenMeta := false
	for dec.More() {
		tok, err := dec.Token()
		if err != nil {
			return nil, corrupt("header JSON: %v", err)
		}
		name, ok := tok.(string)
		if !ok {
			return nil, corrupt("header JSON: key %v is not a string", tok)
		}
		if name == metadataKey {
			if seenMeta {
				return nil, corrupt("duplicate %q in header", metadataKey)
			}
			seenMeta = true
			if err := dec.Decode(&h.Metadata); err != nil {
				return nil, corrupt("%s must map strings to strings: %v", metadataKey, jsonErr(err))
			}
			continue
		}
		if _, dup := h.index[name]; dup {
			return nil, corrupt("duplicate tensor name %q in header", name)
		}
		var raw rawTensor
		if err := dec.Decode(&raw); err != nil {
			return nil, corrupt("tensor %q: %v", name, jsonErr(err))
		}
		info, err := raw.info(name)
		if err != nil {
			return nil, err
		}
		h.index[name] = len(h.Tensors)
		h.Tensors = append(h.Tensors, info)
	}
	if _, err := dec.Token(); err != nil {
		return nil, corrupt("header JSON: %v", err)
	}
	// The writer pads the JSON with spaces to 8-byte alignment; serde_json
	// also accepts other trailing whitespace, so do we, but nothing else.
	if rest := bytes.TrimLeft(hdr[dec.InputOffset():], " \t\r\n"); len(rest) > 0 {
		return nil, corrupt("header has %d bytes of trailing data after the JSON object", len(rest))
	}
	if err := checkCoverage(h.Tensors, bufLen); err != nil {
		return nil, err
	}
	for i := range h.Tensors {
		h.Tensors[i].Offset = h.DataStart() + h.Tensors[i].Begin
	}
	return h, nil
}

// jsonErr strips the unhelpful "json: " prefix off decoder errors and names
// io.ErrUnexpectedEOF as truncation.
func jsonErr(err error) string {
	if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
		return "header JSON is truncated"
	}
	return err.Error()
}

// info validates one header entry on its own (dtype, shape, offsets versus
// the byte size they imply).
func (r rawTensor) info(name string) (TensorInfo, error) {
	t := TensorInfo{Name: name}
	if r.DType == nil {
		return t, corrupt("tensor %q: missing dtype", name)
	}
	if r.Shape == nil {
		return t, corrupt("tensor %q: missing shape", name)
	}
	if r.DataOffsets == nil {
		return t, corrupt("tensor %q: missing data_offsets", name)
	}
	d, err := ParseDType(*r.DType)
	if err != nil {
		return t, fmt.Errorf("tensor %q: %w", name, err)
	}
	t.DType = d
	t.Shape = make([]int, len(r.Shape))
	for i, s := range r.Shape {
		v, err := strconv.ParseInt(string(s), 10, 64)
		if err != nil || v < 0 || v > math.MaxInt {
			return t, corrupt("tensor %q: shape[%d] = %s is not a non-negative integer", name, i, s)
		}
		t.Shape[i] = int(v)
	}
	if len(r.DataOffsets) != 2 {
		return t, corrupt("tensor %q: data_offsets has %d entries, want 2", name, len(r.DataOffsets))
	}
	var off [2]int64
	for i, s := range r.DataOffsets {
		v, err := strconv.ParseInt(string(s), 10, 64)
		if err != nil || v < 0 {
			return t, corrupt("tensor %q: data_offsets[%d] = %s is not a non-negative integer", name, i, s)
		}
		off[i] = v
	}
	t.Begin, t.End = off[0], off[1]
	if t.Begin > t.End {
		return t, corrupt("tensor %q: data_offsets [%d, %d] end before they begin", name, t.Begin, t.End)
	}
	want, ok := byteSize(d, t.Shape)
	if !ok {
		return t, corrupt("tensor %q: %v × shape %v overflows", name, d, t.Shape)
	}
	if t.End-t.Begin != want {
		return t, corrupt("tensor %q: data_offsets [%d, %d] span %d bytes, but %v × shape %v needs %d",
			name, t.Begin, t.End, t.End-t.Begin, d, t.Shape, want)
	}
	return t, nil
}

// checkCoverage enforces the format's rule that tensors tile the data buffer
// exactly: sorted by offsets, each starts where the previous ended, the first
// at 0 and the last ending at bufLen.
func checkCoverage(ts []TensorInfo, bufLen int64) error {
	order := make([]int, len(ts))
	for i := range order {
		order[i] = i
	}
	slices.SortFunc(order, func(a, b int) int {
		if c := cmpInt64(ts[a].Begin, ts[b].Begin); c != 0 {
			return c
		}
		return cmpInt64(ts[a].End, ts[b].End)
	})
	var pos int64
	prev := ""
	for _, i := range order {
		t := ts[i]
		if t.End > bufLen {
			return corrupt("tensor %q: data_offsets [%d, %d] run past the end of the %d-byte data buffer",
				t.Name, t.Begin, t.End, bufLen)
		}
		if t.Begin < pos {
			return corrupt("tensor %q: data_offsets [%d, %d] overlap tensor %q, which ends at %d",
				t.Name, t.Begin, t.End, prev, pos)
		}
		if t.Begin > pos {
			return corrupt("bytes [%d, %d) of the data buffer belong to no tensor (hole before tensor %q)",
				pos, t.Begin, t.Name)
		}
		pos, prev = t.End, t.Name
	}
	if pos != bufLen {
		return corrupt("bytes [%d, %d) at the end of the data buffer belong to no tensor", pos, bufLen)
	}
	return nil
}

func cmpInt64(a, b int64) int {
	switch {
	case a < b:
		return -1
	case a > b:
		return 1
	}
	return 0
}
