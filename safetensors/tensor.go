package safetensors

import (
	"encoding/binary"
	"fmt"
	"math"
	"math/bits"
)

// Tensor is one named tensor with its raw little-endian, row-major bytes.
// Write takes tensors in this form; File.ReadTensor returns them. A Tensor
// does not own Data exclusively: Write only reads it, and the constructors
// below allocate a fresh slice.
type Tensor struct {
	Name  string
	DType DType
	// Shape is the logical shape; an empty shape is a scalar (one element).
	Shape []int
	Data  []byte
}

// NumElements returns the product of the shape (1 for a scalar) and false
// when a dimension is negative or the product overflows int64.
func NumElements(shape []int) (int64, bool) {
	n := uint64(1)
	for _, d := range shape {
		if d < 0 {
			return 0, false
		}
		hi, lo := bits.Mul64(n, uint64(d))
		if hi != 0 || lo > math.MaxInt64 {
			return 0, false
		}
		n = lo
	}
	return int64(n), true
}

// byteSize returns the number of bytes a tensor of this dtype and shape
// occupies, or false when that does not fit in an int64.
func byteSize(d DType, shape []int) (int64, bool) {
	n, ok := NumElements(shape)
	if !ok {
		return 0, false
	}
	hi, lo := bits.Mul64(uint64(n), uint64(d.Size()))
	if hi != 0 || lo > math.MaxInt64 {
		return 0, false
	}
	return int64(lo), true
}

// NewF32 returns an F32 tensor holding v.
func NewF32(name string, shape []int, v []float32) Tensor {
	b := make([]byte, 4*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint32(b[4*i:], math.Float32bits(x))
	}
	return Tensor{Name: name, DType: F32, Shape: shape, Data: b}
}

// NewF16 returns an F16 tensor holding v rounded with Float32ToF16.
func NewF16(name string, shape []int, v []float32) Tensor {
	b := make([]byte, 2*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint16(b[2*i:], Float32ToF16(x))
	}
	return Tensor{Name: name, DType: F16, Shape: shape, Data: b}
}

// NewBF16 returns a BF16 tensor holding v rounded with Float32ToBF16.
func NewBF16(name string, shape []int, v []float32) Tensor {
	b := make([]byte, 2*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint16(b[2*i:], Float32ToBF16(x))
	}
	return Tensor{Name: name, DType: BF16, Shape: shape, Data: b}
}

// NewI64 returns an I64 tensor holding v.
func NewI64(name string, shape []int, v []int64) Tensor {
	b := make([]byte, 8*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint64(b[8*i:], uint64(x))
	}
	return Tensor{Name: name, DType: I64, Shape: shape, Data: b}
}

// NewI32 returns an I32 tensor holding v.
func NewI32(name string, shape []int, v []int32) Tensor {
	b := make([]byte, 4*len(v))
	for i, x := range v {
		binary.LittleEndian.PutUint32(b[4*i:], uint32(x))
	}
	return Tensor{Name: name, DType: I32, Shape: shape, Data: b}
}

// check reports whether the tensor's data length matches dtype × shape.
func (t Tensor) check() error {
	if !t.DType.Valid() {
		return fmt.Errorf("%w %q: dtype %v", ErrInvalidTensor, t.Name, t.DType)
	}
	want, ok := byteSize(t.DType, t.Shape)
	if !ok {
		return fmt.Errorf("%w %q: shape %v is negative or overflows", ErrInvalidTensor, t.Name, t.Shape)
	}
	if int64(len(t.Data)) != want {
		return fmt.Errorf("%w %q: %d data bytes, but %v × shape %v needs %d",
			ErrInvalidTensor, t.Name, len(t.Data), t.DType, t.Shape, want)
	}
	return nil
}

// Float32 converts the tensor to float32: F32 as is, F16 and BF16 exactly,
// F64 rounded to nearest (values beyond float32's range become ±Inf).
func (t Tensor) Float32() ([]float32, error) {
	if err := t.check(); err != nil {
		return nil, err
	}
	d := t.Data
	switch t.DType {
	case F32:
		out := make([]float32, len(d)/4)
		for i := range out {
			out[i] = math.Float32frombits(binary.LittleEndian.Uint32(d[4*i:]))
		}
		return out, nil
	case F16:
		out := make([]float32, len(d)/2)
		for i := range out {
			out[i] = F16ToFloat32(binary.LittleEndian.Uint16(d[2*i:]))
		}
		return out, nil
	case BF16:
		out := make([]float32, len(d)/2)
		for i := range out {
			out[i] = BF16ToFloat32(binary.LittleEndian.Uint16(d[2*i:]))
		}
		return out, nil
	case F64:
		out := make([]float32, len(d)/8)
		for i := range out {
			out[i] = float32(math.Float64frombits(binary.LittleEndian.Uint64(d[8*i:])))
		}
		return out, nil
	}
	return nil, fmt.Errorf("%w: tensor %q is %v, want F32, F16, BF16 or F64", ErrDType, t.Name, t.DType)
}

// Int64s converts an integer tensor (I8, I16, I32, I64, U8, U16, U32, U64) to
// int64; a U64 value above MaxInt64 is an ErrRange error.
func (t Tensor) Int64s() ([]int64, error) {
	if err := t.checkInt(); err != nil {
		return nil, err
	}
	out := make([]int64, len(t.Data)/t.DType.Size())
	for i := range out {
		v, big := t.intAt(i)
		if big {
			return nil, fmt.Errorf("%w: tensor %q element %d = %d does not fit int64",
				ErrRange, t.Name, i, uint64(v))
		}
		out[i] = v
	}
	return out, nil
}

// Int32s converts an integer tensor to int32; a value outside int32's range
// is an ErrRange error naming the element.
func (t Tensor) Int32s() ([]int32, error) {
	if err := t.checkInt(); err != nil {
		return nil, err
	}
	out := make([]int32, len(t.Data)/t.DType.Size())
	for i := range out {
		v, big := t.intAt(i)
		if big || v < math.MinInt32 || v > math.MaxInt32 {
			if big {
				return nil, fmt.Errorf("%w: tensor %q element %d = %d does not fit int32",
					ErrRange, t.Name, i, uint64(v))
			}
			return nil, fmt.Errorf("%w: tensor %q element %d = %d does not fit int32", ErrRange, t.Name, i, v)
		}
		out[i] = int32(v)
	}
	return out, nil
}

func (t Tensor) checkInt() error {
	switch t.DType {
	case I8, I16, I32, I64, U8, U16, U32, U64:
		return t.check()
	}
	return fmt.Errorf("%w: tensor %q is %v, want an integer dtype", ErrDType, t.Name, t.DType)
}

// intAt decodes integer element i. big reports a U64 value above MaxInt64,
// whose bits are then returned as they are.
func (t Tensor) intAt(i int) (v int64, big bool) {
	d := t.Data
	switch t.DType {
	case I8:
		return int64(int8(d[i])), false
	case U8:
		return int64(d[i]), false
	case I16:
		return int64(int16(binary.LittleEndian.Uint16(d[2*i:]))), false
	case U16:
		return int64(binary.LittleEndian.Uint16(d[2*i:])), false
	case I32:
		return int64(int32(binary.LittleEndian.Uint32(d[4*i:]))), false
	case U32:
		return int64(binary.LittleEndian.Uint32(d[4*i:])), false
	case U64:
		u := binary.LittleEndian.Uint64(d[8*i:])
		return int64(u), u > math.MaxInt64
	default: // I64; checkInt admitted only integer dtypes
		return int64(binary.LittleEndian.Uint64(d[8*i:])), false
	}
}
