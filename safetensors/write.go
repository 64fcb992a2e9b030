package safetensors

import (
	"bufio"
	"bytes"
	"encoding/binary"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"sort"
	"strconv"
	"strings"
	"unicode/utf8"
)

// Layout validates tensors and meta and returns the header Write would
// produce: the tensors in data order with their offsets, and the header
// length. Tensors are ordered like the Rust/Python library does (dtype
// widest first in the library's dtype order, then name), so every tensor's
// data is aligned to its element size. A nil or empty meta writes no
// "__metadata__" entry.
func Layout(tensors []Tensor, meta map[string]string) (*Header, error) {
	h, _, err := layout(tensors, meta)
	return h, err
}

// layout returns the header and the exact header bytes (JSON plus padding).
func layout(tensors []Tensor, meta map[string]string) (*Header, []byte, error) {
	seen := make(map[string]bool, len(tensors))
	for _, t := range tensors {
		if t.Name == "" || t.Name == metadataKey || !utf8.ValidString(t.Name) {
			return nil, nil, fmt.Errorf("%w: name %q is empty, reserved or not UTF-8", ErrInvalidTensor, t.Name)
		}
		if seen[t.Name] {
			return nil, nil, fmt.Errorf("%w: duplicate name %q", ErrInvalidTensor, t.Name)
		}
		seen[t.Name] = true
		if err := t.check(); err != nil {
			return nil, nil, err
		}
	}
	for k, v := range meta {
		if !utf8.ValidString(k) || !utf8.ValidString(v) {
			return nil, nil, fmt.Errorf("%w: metadata %q=%q is not UTF-8", ErrInvalidTensor, k, v)
		}
	}
	order := make([]int, len(tensors))
	for i := range order {
		order[i] = i
	}
	slices.SortFunc(order, func(a, b int) int {
		ra, rb := dtypeInfo[tensors[a].DType].rank, dtypeInfo[tensors[b].DType].rank
		if ra != rb {
			return rb - ra
		}
		return strings.Compare(tensors[a].Name, tensors[b].Name)
	})

	h := &Header{Tensors: make([]TensorInfo, len(tensors))}
	if len(meta) > 0 {
		h.Metadata = meta
	}
	// Hand-built JSON in serde_json's compact form, field order as the Rust
	// library writes it, so output matches the library byte for byte.
	var js bytes.Buffer
	js.WriteByte('{')
	if len(meta) > 0 {
		writeJSONString(&js, metadataKey)
		js.WriteString(":{")
		keys := make([]string, 0, len(meta))
		for k := range meta {
			keys = append(keys, k)
		}
		sort.Strings(keys)
		for i, k := range keys {
			if i > 0 {
				js.WriteByte(',')
			}
			writeJSONString(&js, k)
			js.WriteByte(':')
			writeJSONString(&js, meta[k])
		}
		js.WriteByte('}')
	}
	var pos int64
	for j, i := range order {
		t := tensors[i]
		size := int64(len(t.Data))
		h.Tensors[j] = TensorInfo{Name: t.Name, DType: t.DType, Shape: slices.Clone(t.Shape), Begin: pos, End: pos + size}
		if j > 0 || len(meta) > 0 {
			js.WriteByte(',')
		}
		writeJSONString(&js, t.Name)
		js.WriteString(`:{"dtype":"`)
		js.WriteString(t.DType.String())
		js.WriteString(`","shape":[`)
		for k, d := range t.Shape {
			if k > 0 {
				js.WriteByte(',')
			}
			js.WriteString(strconv.Itoa(d))
		}
		js.WriteString(`],"data_offsets":[`)
		js.WriteString(strconv.FormatInt(pos, 10))
		js.WriteByte(',')
		js.WriteString(strconv.FormatInt(pos+size, 10))
		js.WriteString("]}")
		pos += size
	}
	js.WriteByte('}')
	for js.Len()%8 != 0 {
		js.WriteByte(' ')
	}
	h.Len = int64(js.Len())
	for j := range h.Tensors {
		h.Tensors[j].Offset = h.DataStart() + h.Tensors[j].Begin
	}
	h.buildIndex()
	return h, js.Bytes(), nil
}

// writeJSONString writes s as a JSON string without Go's HTML escaping of
// <, > and &, which serde_json does not do either.
func writeJSONString(b *bytes.Buffer, s string) {
	enc := json.NewEncoder(b)
	enc.SetEscapeHTML(false)
	_ = enc.Encode(s) // a valid UTF-8 string always encodes
	b.Truncate(b.Len() - 1)
}

// Write writes tensors and meta as a safetensors file to w, laid out as
// Layout describes. It only reads the tensors' Data.
func Write(w io.Writer, tensors []Tensor, meta map[string]string) error {
	h, hdr, err := layout(tensors, meta)
	if err != nil {
		return err
	}
	byName := make(map[string]int, len(tensors))
	for i, t := range tensors {
		byName[t.Name] = i
	}
	var lenBuf [8]byte
	binary.LittleEndian.PutUint64(lenBuf[:], uint64(len(hdr)))
	if _, err := w.Write(lenBuf[:]); err != nil {
		return err
	}
	if _, err := w.Write(hdr); err != nil {
		return err
	}
	for _, info := range h.Tensors {
		if _, err := w.Write(tensors[byName[info.Name]].Data); err != nil {
			return err
		}
	}
	return nil
}

// WriteFile writes a safetensors file at path atomically: it writes a
// temporary file in the same directory, fsyncs it, renames it over path and
// fsyncs the directory, so a crash leaves either the old file or the whole
// new one. The file gets mode 0644.
func WriteFile(path string, tensors []Tensor, meta map[string]string) (err error) {
	if _, _, err := layout(tensors, meta); err != nil {
		return err
	}
	dir := filepath.Dir(path)
	tmp, err := os.CreateTemp(dir, "."+filepath.Base(path)+".tmp-*")
	if err != nil {
		return err
	}
	defer func() {
		if err != nil {
			tmp.Close()
			os.Remove(tmp.Name())
		}
	}()
	bw := bufio.NewWriterSize(tmp, 1<<20)
	if err = Write(bw, tensors, meta); err != nil {
		return err
	}
	if err = bw.Flush(); err != nil {
		return err
	}
	if err = tmp.Chmod(0o644); err != nil {
		return err
	}
	if err = tmp.Sync(); err != nil {
		return err
	}
	if err = tmp.Close(); err != nil {
		return err
	}
	if err = os.Rename(tmp.Name(), path); err != nil {
		return err
	}
	return syncDir(dir)
}

// syncDir makes a rename in dir durable.
func syncDir(dir string) error {
	d, err := os.Open(dir)
	if err != nil {
		return err
	}
	defer d.Close()
	return d.Sync()
}
