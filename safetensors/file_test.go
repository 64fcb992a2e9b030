package safetensors

import (
	"bytes"
	"encoding/binary"
	"errors"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
)

// rawFile builds a file from a literal header (unpadded) and data buffer.
func rawFile(header string, data []byte) []byte {
	var b bytes.Buffer
	binary.Write(&b, binary.LittleEndian, uint64(len(header)))
	b.WriteString(header)
	b.Write(data)
	return b.Bytes()
}

func readBytes(b []byte) (*File, error) { return Read(bytes.NewReader(b), int64(len(b))) }

func encode(t *testing.T, ts []Tensor, meta map[string]string) []byte {
	t.Helper()
	var b bytes.Buffer
	if err := Write(&b, ts, meta); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// The layout and bytes the Rust library (safetensors.torch.save_file)
// produces, worked by hand: tensors sorted widest dtype first (I64 before
// F32), compact JSON in dtype/shape/data_offsets order, padded with spaces to
// a multiple of 8.
func TestWriteGoldenBytes(t *testing.T) {
	got := encode(t, []Tensor{
		NewF32("a", []int{2}, []float32{1, 2}),
		NewI64("b", []int{1}, []int64{7}),
	}, nil)
	hdr := `{"b":{"dtype":"I64","shape":[1],"data_offsets":[0,8]},"a":{"dtype":"F32","shape":[2],"data_offsets":[8,16]}}`
	// len(hdr) = 108, padded to 112.
	want := rawFile(hdr+"    ", []byte{
		7, 0, 0, 0, 0, 0, 0, 0, // b = 7
		0, 0, 0x80, 0x3f, 0, 0, 0, 0x40, // a = 1.0f, 2.0f
	})
	if !bytes.Equal(got, want) {
		t.Fatalf("Write output\n%q\nwant\n%q", got, want)
	}
	meta := encode(t, []Tensor{NewF32("<&>", nil, []float32{0.5})}, map[string]string{"z": "1", "format": "pt"})
	wantHdr := `{"__metadata__":{"format":"pt","z":"1"},"<&>":{"dtype":"F32","shape":[],"data_offsets":[0,4]}}`
	if gotHdr := strings.TrimRight(string(meta[8:len(meta)-4]), " "); gotHdr != wantHdr {
		t.Fatalf("header with metadata\n%s\nwant\n%s", gotHdr, wantHdr)
	}
}

func TestRoundTripEveryDType(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 7))
	var ts []Tensor
	for d := BOOL; d <= U64; d++ {
		shape := []int{2, 3}
		data := make([]byte, 6*d.Size())
		for i := range data {
			data[i] = byte(rng.Uint32())
		}
		if d == BOOL {
			for i := range data {
				data[i] &= 1
			}
		}
		ts = append(ts, Tensor{Name: "t_" + d.String(), DType: d, Shape: shape, Data: data})
	}
	ts = append(ts,
		Tensor{Name: "scalar", DType: F32, Shape: []int{}, Data: []byte{0, 0, 0x80, 0x3f}},
		Tensor{Name: "empty", DType: I64, Shape: []int{0, 5}, Data: []byte{}},
	)
	meta := map[string]string{"step": "12", "note": "ünïcode"}
	b := encode(t, ts, meta)
	f, err := readBytes(b)
	if err != nil {
		t.Fatal(err)
	}
	if len(f.Tensors) != len(ts) {
		t.Fatalf("read %d tensors, wrote %d", len(f.Tensors), len(ts))
	}
	for _, want := range ts {
		got, err := f.ReadTensor(want.Name)
		if err != nil {
			t.Fatal(err)
		}
		if got.DType != want.DType || !slices.Equal(got.Shape, want.Shape) || !bytes.Equal(got.Data, want.Data) {
			t.Errorf("%s: got %v %v %x, want %v %v %x", want.Name, got.DType, got.Shape, got.Data, want.DType, want.Shape, want.Data)
		}
		info, _ := f.Lookup(want.Name)
		if info.Offset%int64(want.DType.Size()) != 0 {
			t.Errorf("%s: offset %d not aligned to %d", want.Name, info.Offset, want.DType.Size())
		}
	}
	if len(f.Metadata) != 2 || f.Metadata["step"] != "12" || f.Metadata["note"] != "ünïcode" {
		t.Errorf("metadata = %v", f.Metadata)
	}
	// Layout predicts exactly what Read finds.
	h, err := Layout(ts, meta)
	if err != nil {
		t.Fatal(err)
	}
	if h.Len != f.Len || !slices.EqualFunc(h.Tensors, f.Tensors, func(a, b TensorInfo) bool {
		return a.Name == b.Name && a.Offset == b.Offset && a.Begin == b.Begin && a.End == b.End
	}) {
		t.Errorf("Layout %+v\ndiffers from file %+v", h.Tensors, f.Tensors)
	}
	if int64(len(b)) != f.DataStart()+f.Tensors[len(f.Tensors)-1].End {
		t.Errorf("file size %d, header says %d", len(b), f.DataStart()+f.Tensors[len(f.Tensors)-1].End)
	}
}

func TestTypedAccessors(t *testing.T) {
	vals := []float32{0, 1, -2.5, 65504, 0x1p-24, float32(math.Inf(1))}
	f64 := make([]byte, 8*len(vals))
	for i, v := range vals {
		binary.LittleEndian.PutUint64(f64[8*i:], math.Float64bits(float64(v)))
	}
	b := encode(t, []Tensor{
		NewF32("f32", []int{6}, vals),
		NewF16("f16", []int{2, 3}, vals),
		NewBF16("bf16", []int{6}, vals),
		{Name: "f64", DType: F64, Shape: []int{6}, Data: f64},
		NewI64("i64", []int{3}, []int64{-1, 1 << 40, 5}),
		NewI32("i32", []int{3}, []int32{-7, 0, math.MaxInt32}),
		{Name: "u8", DType: U8, Shape: []int{2}, Data: []byte{0, 255}},
		{Name: "u64big", DType: U64, Shape: []int{1}, Data: []byte{0, 0, 0, 0, 0, 0, 0, 0x80}},
	}, nil)
	f, err := readBytes(b)
	if err != nil {
		t.Fatal(err)
	}
	// Every value above is exact in F16; in BF16 all but 65504 are
	// (65504 = 0x477fe000 rounds to 65536).
	for _, name := range []string{"f32", "f16", "f64"} {
		got, shape, err := f.Float32(name)
		if err != nil || !slices.Equal(got, vals) {
			t.Errorf("Float32(%s) = %v %v %v, want %v", name, got, shape, err, vals)
		}
	}
	if got, _, _ := f.Float32("bf16"); got[3] != 65536 || got[2] != -2.5 {
		t.Errorf("Float32(bf16) = %v", got)
	}
	if got, shape, _ := f.Float32("f16"); !slices.Equal(shape, []int{2, 3}) || len(got) != 6 {
		t.Errorf("f16 shape = %v", shape)
	}
	if got, _, err := f.Int64s("i64"); err != nil || !slices.Equal(got, []int64{-1, 1 << 40, 5}) {
		t.Errorf("Int64s(i64) = %v %v", got, err)
	}
	if got, _, err := f.Int32s("i32"); err != nil || !slices.Equal(got, []int32{-7, 0, math.MaxInt32}) {
		t.Errorf("Int32s(i32) = %v %v", got, err)
	}
	if got, _, err := f.Int64s("u8"); err != nil || !slices.Equal(got, []int64{0, 255}) {
		t.Errorf("Int64s(u8) = %v %v", got, err)
	}
	if _, _, err := f.Int32s("i64"); !errors.Is(err, ErrRange) || !strings.Contains(err.Error(), "element 1") {
		t.Errorf("Int32s(i64) error = %v, want ErrRange at element 1", err)
	}
	if _, _, err := f.Int64s("u64big"); !errors.Is(err, ErrRange) {
		t.Errorf("Int64s(u64big) error = %v, want ErrRange", err)
	}
	if _, _, err := f.Int64s("f32"); !errors.Is(err, ErrDType) {
		t.Errorf("Int64s(f32) error = %v, want ErrDType", err)
	}
	if _, _, err := f.Float32("i32"); !errors.Is(err, ErrDType) {
		t.Errorf("Float32(i32) error = %v, want ErrDType", err)
	}
	part := make([]byte, 8)
	if err := f.ReadRawAt("i64", part, 8); err != nil || binary.LittleEndian.Uint64(part) != 1<<40 {
		t.Errorf("ReadRawAt(i64, 8) = %x %v, want element 1", part, err)
	}
	if err := f.ReadRawAt("i64", part, 17); !errors.Is(err, ErrRange) {
		t.Errorf("ReadRawAt past the end: %v", err)
	}
	if err := f.ReadRawAt("nope", part, 0); !errors.Is(err, ErrNotFound) {
		t.Errorf("ReadRawAt(nope): %v", err)
	}
	if _, err := f.Raw("nope"); !errors.Is(err, ErrNotFound) {
		t.Errorf("Raw(nope) error = %v, want ErrNotFound", err)
	}
}

// Names come back in header order, which for foreign files need not be
// data order or sorted.
func TestHeaderOrderPreserved(t *testing.T) {
	hdr := `{"z":{"dtype":"U8","shape":[1],"data_offsets":[2,3]},"a":{"dtype":"U8","shape":[2],"data_offsets":[0,2]},"m":{"dtype":"U8","shape":[],"data_offsets":[3,4]}}`
	f, err := readBytes(rawFile(hdr, []byte{1, 2, 3, 4}))
	if err != nil {
		t.Fatal(err)
	}
	if got := f.Names(); !slices.Equal(got, []string{"z", "a", "m"}) {
		t.Errorf("Names = %v", got)
	}
	if raw, _ := f.Raw("z"); !bytes.Equal(raw, []byte{3}) {
		t.Errorf("z = %v", raw)
	}
	info, _ := f.Lookup("m")
	if want := int64(8 + len(hdr) + 3); info.Offset != want {
		t.Errorf("m offset = %d, want %d", info.Offset, want)
	}
}

func TestReadCorrupt(t *testing.T) {
	u8 := func(name string, shape string, b, e int) string {
		return `"` + name + `":{"dtype":"U8","shape":` + shape + `,"data_offsets":[` + strconv.Itoa(b) + `,` + strconv.Itoa(e) + `]}`
	}
	bigLen := make([]byte, 16)
	binary.LittleEndian.PutUint64(bigLen, MaxHeaderSize+1)
	pastEnd := make([]byte, 16)
	binary.LittleEndian.PutUint64(pastEnd, 9)
	cases := []struct {
		name    string
		file    []byte
		want    error
		mention string
	}{
		{"short file", []byte{1, 2, 3}, ErrCorrupt, "shorter than"},
		{"header too large", bigLen, ErrHeaderTooLarge, "limit"},
		{"header past end", pastEnd, ErrCorrupt, "past the end"},
		{"empty header", rawFile("", nil), ErrCorrupt, "'{'"},
		{"not an object", rawFile(`[]`, nil), ErrCorrupt, "'{'"},
		{"invalid JSON", rawFile(`{"a":{"dtype":"U8",}}`, nil), ErrCorrupt, "a"},
		{"truncated JSON", rawFile(`{"a":{"dtype":"U8"`, nil), ErrCorrupt, "truncated"},
		{"not UTF-8", rawFile("{\"\xff\":1}", nil), ErrCorrupt, "UTF-8"},
		{"trailing garbage", rawFile(`{} x`, nil), ErrCorrupt, "trailing"},
		{"entry not an object", rawFile(`{"w":5}`, nil), ErrCorrupt, `"w"`},
		{"unknown dtype", rawFile(`{"w":{"dtype":"F128","shape":[1],"data_offsets":[0,16]}}`, make([]byte, 16)), ErrUnknownDType, `"w"`},
		{"sub-byte dtype", rawFile(`{"w":{"dtype":"F4","shape":[2],"data_offsets":[0,1]}}`, make([]byte, 1)), ErrUnknownDType, "F4"},
		{"missing dtype", rawFile(`{"w":{"shape":[1],"data_offsets":[0,1]}}`, make([]byte, 1)), ErrCorrupt, "missing dtype"},
		{"missing shape", rawFile(`{"w":{"dtype":"U8","data_offsets":[0,1]}}`, make([]byte, 1)), ErrCorrupt, "missing shape"},
		{"missing offsets", rawFile(`{"w":{"dtype":"U8","shape":[1]}}`, make([]byte, 1)), ErrCorrupt, "missing data_offsets"},
		{"unknown field", rawFile(`{"w":{"dtype":"U8","shape":[1],"data_offsets":[0,1],"x":1}}`, make([]byte, 1)), ErrCorrupt, `"x"`},
		{"negative dim", rawFile(`{`+u8("w", "[-1]", 0, 0)+`}`, nil), ErrCorrupt, "shape[0] = -1"},
		{"fractional dim", rawFile(`{`+u8("w", "[1.5]", 0, 0)+`}`, nil), ErrCorrupt, "shape[0] = 1.5"},
		{"overflowing shape", rawFile(`{`+u8("w", "[4611686018427387904,4]", 0, 0)+`}`, nil), ErrCorrupt, "overflows"},
		{"huge dim", rawFile(`{`+u8("w", "[99999999999999999999]", 0, 0)+`}`, nil), ErrCorrupt, "shape[0]"},
		{"one offset", rawFile(`{"w":{"dtype":"U8","shape":[1],"data_offsets":[0]}}`, make([]byte, 1)), ErrCorrupt, "2"},
		{"negative offset", rawFile(`{"w":{"dtype":"U8","shape":[1],"data_offsets":[-1,0]}}`, nil), ErrCorrupt, "data_offsets[0]"},
		{"size mismatch", rawFile(`{"w":{"dtype":"F32","shape":[2],"data_offsets":[0,4]}}`, make([]byte, 4)), ErrCorrupt, "needs 8"},
		{"end before begin", rawFile(`{`+u8("w", "[0]", 4, 0)+`}`, nil), ErrCorrupt, "end before"},
		{"out of range", rawFile(`{`+u8("w", "[4]", 0, 4)+`}`, make([]byte, 2)), ErrCorrupt, "past the end"},
		{"overlap", rawFile(`{`+u8("a", "[2]", 0, 2)+`,`+u8("b", "[2]", 1, 3)+`}`, make([]byte, 3)), ErrCorrupt, "overlap"},
		{"zero-size inside another", rawFile(`{`+u8("a", "[2]", 0, 2)+`,`+u8("b", "[0]", 1, 1)+`}`, make([]byte, 2)), ErrCorrupt, "overlap"},
		{"hole", rawFile(`{`+u8("a", "[1]", 0, 1)+`,`+u8("b", "[1]", 2, 3)+`}`, make([]byte, 3)), ErrCorrupt, "hole before tensor \"b\""},
		{"hole at start", rawFile(`{`+u8("a", "[1]", 1, 2)+`}`, make([]byte, 2)), ErrCorrupt, "[0, 1)"},
		{"bytes after last", rawFile(`{`+u8("a", "[1]", 0, 1)+`}`, make([]byte, 3)), ErrCorrupt, "[1, 3)"},
		{"data with no tensors", rawFile(`{}`, make([]byte, 1)), ErrCorrupt, "[0, 1)"},
		{"duplicate name", rawFile(`{`+u8("a", "[1]", 0, 1)+`,`+u8("a", "[1]", 1, 2)+`}`, make([]byte, 2)), ErrCorrupt, `duplicate tensor name "a"`},
		{"duplicate metadata", rawFile(`{"__metadata__":{},"__metadata__":{}}`, nil), ErrCorrupt, "duplicate"},
		{"metadata not strings", rawFile(`{"__metadata__":{"a":1}}`, nil), ErrCorrupt, "__metadata__"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := readBytes(c.file)
			if !errors.Is(err, c.want) {
				t.Fatalf("error = %v, want %v", err, c.want)
			}
			if !strings.Contains(err.Error(), c.mention) {
				t.Fatalf("error %q does not mention %q", err, c.mention)
			}
		})
	}
}

// Accepted although unusual: trailing whitespace other than spaces, empty
// metadata, null metadata, an empty file ({} and no data), zero-size tensors
// sharing an offset.
func TestReadLenient(t *testing.T) {
	for _, file := range [][]byte{
		rawFile("{}\n\t ", nil),
		rawFile(`{"__metadata__":null}`, nil),
		rawFile(`{"__metadata__":{}}`, nil),
		rawFile(`{"a":{"dtype":"F32","shape":[0],"data_offsets":[0,0]},"b":{"dtype":"I64","shape":[3,0],"data_offsets":[0,0]},"c":{"dtype":"U8","shape":[1],"data_offsets":[0,1]}}`, []byte{9}),
	} {
		if _, err := readBytes(file); err != nil {
			t.Errorf("%q: %v", file, err)
		}
	}
}

func TestWriteInvalid(t *testing.T) {
	good := NewF32("w", []int{2}, []float32{1, 2})
	cases := []struct {
		name string
		ts   []Tensor
		meta map[string]string
	}{
		{"short data", []Tensor{{Name: "w", DType: F32, Shape: []int{3}, Data: make([]byte, 8)}}, nil},
		{"negative dim", []Tensor{{Name: "w", DType: F32, Shape: []int{-1}}}, nil},
		{"invalid dtype", []Tensor{{Name: "w", Shape: []int{1}, Data: make([]byte, 1)}}, nil},
		{"duplicate", []Tensor{good, good}, nil},
		{"empty name", []Tensor{{Name: "", DType: U8, Shape: []int{}, Data: []byte{1}}}, nil},
		{"reserved name", []Tensor{{Name: "__metadata__", DType: U8, Shape: []int{}, Data: []byte{1}}}, nil},
		{"bad metadata", []Tensor{good}, map[string]string{"k": "\xff"}},
	}
	for _, c := range cases {
		if err := Write(&bytes.Buffer{}, c.ts, c.meta); !errors.Is(err, ErrInvalidTensor) {
			t.Errorf("%s: error = %v, want ErrInvalidTensor", c.name, err)
		}
	}
}

func TestWriteFileAtomic(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "model.safetensors")
	first := []Tensor{NewF32("w", []int{2}, []float32{1, 2})}
	if err := WriteFile(path, first, map[string]string{"v": "1"}); err != nil {
		t.Fatal(err)
	}
	second := []Tensor{NewI32("step", nil, []int32{5}), NewBF16("w", []int{1}, []float32{3})}
	if err := WriteFile(path, second, nil); err != nil {
		t.Fatal(err)
	}
	f, err := Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if got := f.Names(); !slices.Equal(got, []string{"step", "w"}) || f.Metadata != nil {
		t.Errorf("after overwrite: names %v, metadata %v", got, f.Metadata)
	}
	if v, _, _ := f.Float32("w"); !slices.Equal(v, []float32{3}) {
		t.Errorf("w = %v", v)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Errorf("directory holds %d entries, want only the file (no temp files left)", len(entries))
	}
	if st, _ := os.Stat(path); st.Mode().Perm() != 0o644 {
		t.Errorf("mode = %v, want 0644", st.Mode().Perm())
	}
	// A rejected write leaves the existing file as it was and no temp file.
	if err := WriteFile(path, []Tensor{{Name: "bad", DType: F32, Shape: []int{9}}}, nil); !errors.Is(err, ErrInvalidTensor) {
		t.Fatalf("invalid write error = %v", err)
	}
	if err := WriteFile(filepath.Join(dir, "missing", "x.safetensors"), first, nil); err == nil {
		t.Fatal("write into a missing directory succeeded")
	}
	entries, _ = os.ReadDir(dir)
	if len(entries) != 1 {
		t.Errorf("after failed writes the directory holds %d entries", len(entries))
	}
}

func TestOpenErrors(t *testing.T) {
	dir := t.TempDir()
	if _, err := Open(filepath.Join(dir, "none")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("missing file: %v", err)
	}
	p := filepath.Join(dir, "bad.safetensors")
	os.WriteFile(p, rawFile(`{"a":1}`, nil), 0o644)
	_, err := Open(p)
	if !errors.Is(err, ErrCorrupt) || !strings.Contains(err.Error(), p) {
		t.Errorf("corrupt file error = %v, want ErrCorrupt naming the path", err)
	}
}

func TestDTypeText(t *testing.T) {
	for d := BOOL; d <= U64; d++ {
		b, err := d.MarshalText()
		if err != nil {
			t.Fatal(err)
		}
		var back DType
		if err := back.UnmarshalText(b); err != nil || back != d {
			t.Errorf("%v -> %s -> %v %v", d, b, back, err)
		}
	}
	if _, err := Invalid.MarshalText(); !errors.Is(err, ErrUnknownDType) {
		t.Errorf("Invalid.MarshalText error = %v", err)
	}
}
