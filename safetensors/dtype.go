package safetensors

import "fmt"

// DType is a tensor element type. Its String is the name used in the file.
type DType uint8

// The dtypes this package reads and writes. The zero value is Invalid, so an
// unset DType never passes for a real one.
const (
	Invalid DType = iota
	BOOL
	U8
	I8
	F8E5M2
	F8E4M3
	I16
	U16
	F16
	BF16
	I32
	U32
	F32
	F64
	I64
	U64
)

// dtypeInfo is indexed by DType. rank is the dtype's position in the Rust
// library's Dtype enum (which derives Ord); Write sorts by it, widest first,
// to produce the same layout as the library.
var dtypeInfo = [...]struct {
	name string
	size int
	rank int
}{
	Invalid: {"INVALID", 0, -1},
	BOOL:    {"BOOL", 1, 0},
	U8:      {"U8", 1, 4},
	I8:      {"I8", 1, 5},
	F8E5M2:  {"F8_E5M2", 1, 6},
	F8E4M3:  {"F8_E4M3", 1, 7},
	I16:     {"I16", 2, 9},
	U16:     {"U16", 2, 10},
	F16:     {"F16", 2, 11},
	BF16:    {"BF16", 2, 12},
	I32:     {"I32", 4, 13},
	U32:     {"U32", 4, 14},
	F32:     {"F32", 4, 15},
	F64:     {"F64", 8, 16},
	I64:     {"I64", 8, 17},
	U64:     {"U64", 8, 18},
}

// String returns the dtype's name as written in safetensors headers.
func (d DType) String() string {
	if int(d) < len(dtypeInfo) {
		return dtypeInfo[d].name
	}
	return fmt.Sprintf("DType(%d)", uint8(d))
}

// Size returns the size of one element in bytes, 0 for an invalid dtype.
func (d DType) Size() int {
	if int(d) < len(dtypeInfo) {
		return dtypeInfo[d].size
	}
	return 0
}

// Valid reports whether d is one of the dtypes above (not Invalid).
func (d DType) Valid() bool { return d != Invalid && int(d) < len(dtypeInfo) }

// ParseDType returns the dtype named s (as in a header: "F32", "BF16", ...).
func ParseDType(s string) (DType, error) {
	for d := BOOL; int(d) < len(dtypeInfo); d++ {
		if dtypeInfo[d].name == s {
			return d, nil
		}
	}
	return Invalid, fmt.Errorf("%w %q", ErrUnknownDType, s)
}

// MarshalText writes the dtype's header name, so a DType encodes in JSON (for
// example in a checkpoint manifest) the way it does in a safetensors header.
func (d DType) MarshalText() ([]byte, error) {
	if !d.Valid() {
		return nil, fmt.Errorf("%w: %v", ErrUnknownDType, d)
	}
	return []byte(d.String()), nil
}

// UnmarshalText parses a header dtype name.
func (d *DType) UnmarshalText(b []byte) error {
	v, err := ParseDType(string(b))
	if err != nil {
		return err
	}
	*d = v
	return nil
}
