package graph

import "strings"

// DType is a tensor element type. The numbering follows ONNX's
// TensorProto.DataType so importers can convert with a cast.
type DType uint8

// The element types opplace knows.
const (
	Undefined      DType = 0
	Float32        DType = 1
	Uint8          DType = 2
	Int8           DType = 3
	Uint16         DType = 4
	Int16          DType = 5
	Int32          DType = 6
	Int64          DType = 7
	String         DType = 8
	Bool           DType = 9
	Float16        DType = 10
	Float64        DType = 11
	Uint32         DType = 12
	Uint64         DType = 13
	Complex64      DType = 14
	Complex128     DType = 15
	BFloat16       DType = 16
	Float8E4M3FN   DType = 17
	Float8E4M3FNUZ DType = 18
	Float8E5M2     DType = 19
	Float8E5M2FNUZ DType = 20
	Uint4          DType = 21
	Int4           DType = 22
	Float4E2M1     DType = 23
)

var dtypeInfo = [...]struct {
	name string
	// bits per element; 0 for types of no fixed size.
	bits int64
}{
	Undefined:      {"undefined", 0},
	Float32:        {"float32", 32},
	Uint8:          {"uint8", 8},
	Int8:           {"int8", 8},
	Uint16:         {"uint16", 16},
	Int16:          {"int16", 16},
	Int32:          {"int32", 32},
	Int64:          {"int64", 64},
	String:         {"string", 0},
	Bool:           {"bool", 8},
	Float16:        {"float16", 16},
	Float64:        {"float64", 64},
	Uint32:         {"uint32", 32},
	Uint64:         {"uint64", 64},
	Complex64:      {"complex64", 64},
	Complex128:     {"complex128", 128},
	BFloat16:       {"bfloat16", 16},
	Float8E4M3FN:   {"float8e4m3fn", 8},
	Float8E4M3FNUZ: {"float8e4m3fnuz", 8},
	Float8E5M2:     {"float8e5m2", 8},
	Float8E5M2FNUZ: {"float8e5m2fnuz", 8},
	Uint4:          {"uint4", 4},
	Int4:           {"int4", 4},
	Float4E2M1:     {"float4e2m1", 4},
}

// Size is the element size in bytes, rounded up (4-bit types count a
// byte); 8 for strings, whose real size is unknowable from the shape.
func (d DType) Size() int64 {
	if int(d) >= len(dtypeInfo) {
		return 4
	}
	if d == String {
		return 8
	}
	b := dtypeInfo[d].bits
	if b == 0 {
		return 4
	}
	return (b + 7) / 8
}

// Bits is the element size in bits; 0 for strings and types of no fixed
// size or unknown.
func (d DType) Bits() int64 {
	if int(d) >= len(dtypeInfo) {
		return 0
	}
	return dtypeInfo[d].bits
}

// Valid reports whether d is a known element type.
func (d DType) Valid() bool { return d != Undefined && int(d) < len(dtypeInfo) }

func (d DType) String() string {
	if int(d) < len(dtypeInfo) {
		return dtypeInfo[d].name
	}
	return "dtype?"
}

// IsFloat reports whether d is a floating-point type.
func (d DType) IsFloat() bool {
	switch d {
	case Float32, Float16, Float64, BFloat16, Float8E4M3FN, Float8E4M3FNUZ, Float8E5M2, Float8E5M2FNUZ, Float4E2M1:
		return true
	}
	return false
}

// ParseDType reads a type name as DType.String writes it, also accepting
// common aliases (fp32, half, bf16, double, int, float).
func ParseDType(s string) (DType, bool) {
	s = strings.ToLower(strings.TrimSpace(s))
	switch s {
	case "fp32", "float":
		return Float32, true
	case "fp16", "half":
		return Float16, true
	case "bf16":
		return BFloat16, true
	case "fp64", "double":
		return Float64, true
	case "int":
		return Int32, true
	case "fp8":
		return Float8E4M3FN, true
	}
	for d, info := range dtypeInfo {
		if d != int(Undefined) && info.name == s {
			return DType(d), true
		}
	}
	return Undefined, false
}
