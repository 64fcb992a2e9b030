package safetensors

import (
	"bytes"
	"maps"
	"slices"
	"testing"
)

// FuzzRead feeds arbitrary bytes to Read. It must never panic, and whatever
// it accepts must be internally consistent: every tensor readable, the typed
// accessors safe, and a Write of the tensors read back identically.
func FuzzRead(f *testing.F) {
	var seed bytes.Buffer
	Write(&seed, []Tensor{
		NewF32("w", []int{2, 2}, []float32{1, 2, 3, 4}),
		NewF16("h", []int{3}, []float32{1, -1, 0.5}),
		NewBF16("b", []int{1}, []float32{2}),
		NewI64("i", []int{2}, []int64{-1, 1 << 40}),
		NewI32("j", nil, []int32{3}),
		{Name: "e", DType: U8, Shape: []int{0}, Data: nil},
	}, map[string]string{"format": "pt"})
	f.Add(seed.Bytes())
	f.Add(rawFile(`{}`, nil))
	f.Add(rawFile(`{"a":{"dtype":"U8","shape":[2],"data_offsets":[0,2]},"b":{"dtype":"U64","shape":[1],"data_offsets":[2,10]}}`, []byte{1, 2, 0, 0, 0, 0, 0, 0, 0, 0x80}))
	f.Add(rawFile(`{"a":{"dtype":"F64","shape":[1],"data_offsets":[0,8]}}`, make([]byte, 8)))
	f.Add(rawFile(`{"a":{"dtype":"U8","shape":[2],"data_offsets":[0,2]},"b":{"dtype":"U8","shape":[2],"data_offsets":[1,3]}}`, make([]byte, 3)))
	f.Add(rawFile(`{"a":{"dtype":"I32","shape":[-1],"data_offsets":[0,4]}}`, make([]byte, 4)))
	f.Add(rawFile(`{"__metadata__":{"a":"b"},"x":{"dtype":"BOOL","shape":[1,1],"data_offsets":[0,1]}}`, []byte{1}))
	f.Fuzz(func(t *testing.T, b []byte) {
		file, err := readBytes(b)
		if err != nil {
			return
		}
		var ts []Tensor
		writable := true
		for _, info := range file.Tensors {
			tn, err := file.ReadTensor(info.Name)
			if err != nil {
				t.Fatalf("accepted file but tensor %q unreadable: %v", info.Name, err)
			}
			if int64(len(tn.Data)) != info.Size() || info.Offset+info.Size() > file.Size {
				t.Fatalf("tensor %q: %d bytes at %d, info says %d (file %d bytes)", info.Name, len(tn.Data), info.Offset, info.Size(), file.Size)
			}
			tn.Float32()
			tn.Int64s()
			tn.Int32s()
			if info.Name == "" {
				writable = false
			}
			ts = append(ts, tn)
		}
		if !writable {
			return
		}
		var out bytes.Buffer
		if err := Write(&out, ts, file.Metadata); err != nil {
			t.Fatalf("re-writing an accepted file: %v", err)
		}
		back, err := readBytes(out.Bytes())
		if err != nil {
			t.Fatalf("reading our own output: %v", err)
		}
		if len(back.Tensors) != len(ts) || !maps.Equal(back.Metadata, nonEmpty(file.Metadata)) {
			t.Fatalf("round trip changed the header: %v %v vs %v %v", back.Names(), back.Metadata, file.Names(), file.Metadata)
		}
		for _, want := range ts {
			got, err := back.ReadTensor(want.Name)
			if err != nil || got.DType != want.DType || !slices.Equal(got.Shape, want.Shape) || !bytes.Equal(got.Data, want.Data) {
				t.Fatalf("round trip changed tensor %q: %v", want.Name, err)
			}
		}
	})
}

// nonEmpty maps an empty metadata map to nil, as Write omits it.
func nonEmpty(m map[string]string) map[string]string {
	if len(m) == 0 {
		return nil
	}
	return m
}
