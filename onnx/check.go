package onnx

import (
	"fmt"
	"github.com/opplace/opplace/internal/shapes"

	"github.com/opplace/opplace/graph"
	"github.com/opplace/opplace/onnx/onnxpb"
)

// The checks here refuse what a protobuf decoder accepts but ONNX does
// not define, and the importer would otherwise take silently: an element
// type number ONNX has not assigned (shown as "dtype?" and costed at 4
// bytes), a tensor whose stored data does not hold the elements its
// dimensions count (1,000 parameters counted from 4 bytes), an operator
// set imported twice at different versions (the last silently wins).

// maxElemType is the largest TensorProto.DataType ONNX 1.18 assigns
// (FLOAT4E2M1); graph.DType numbers types as ONNX does.
const maxElemType = int32(graph.Float4E2M1)

// elemType converts an ONNX element type number. 0 (UNDEFINED) passes:
// a value whose type is left out is not a malformed one.
func elemType(t int32) (graph.DType, error) {
	if err := checkElemType(int64(t)); err != nil {
		return 0, err
	}
	return graph.DType(t), nil
}

// checkElemType refuses an element type number ONNX has not assigned.
func checkElemType(t int64) error {
	if t < 0 || t > int64(maxElemType) {
		return fmt.Errorf("%d is not an ONNX tensor element type (ONNX defines 1 to %d): the exporter wrote a malformed model; re-export it", t, maxElemType)
	}
	return nil
}

// checkOpsets refuses an operator set imported twice at different
// versions ("" and "ai.onnx" are one domain).
func checkOpsets(mp *onnxpb.ModelProto) error {
	seen := map[string]int64{}
	for i, o := range mp.GetOpsetImport() {
		d := normDomain(o.GetDomain())
		if v, ok := seen[d]; ok && v != o.GetVersion() {
			name := d
			if name == "" {
				name = "ai.onnx"
			}
			return fmt.Errorf("opset_import[%d]: domain %q is imported twice, at opsets %d and %d: a model imports each operator set once, and which one its ops follow is ambiguous; re-export it with one", i, name, v, o.GetVersion())
		}
		seen[d] = o.GetVersion()
	}
	return nil
}

// checkTensor refuses a tensor whose data_type ONNX does not define, or
// whose data stored in the file (raw_data, or the typed field its type
// uses) holds another count of elements than its dimensions give.
// Tensors kept in external files are not read, so not checked.
func checkTensor(tp *onnxpb.TensorProto) error {
	dt, err := elemType(tp.GetDataType())
	if err != nil {
		return fmt.Errorf("data_type %v", err)
	}
	if tp.GetDataLocation() == onnxpb.TensorProto_EXTERNAL {
		return nil
	}
	n := shapes.Prod(tp.GetDims())
	if raw := tp.GetRawData(); len(raw) > 0 {
		if dt == graph.String {
			return fmt.Errorf("is a string tensor with raw_data, which ONNX stores only in string_data: re-export the model")
		}
		bits := dt.Bits()
		if bits == 0 {
			return nil
		}
		want := shapes.MulSat(n, bits)/8 + min(shapes.MulSat(n, bits)%8, 1)
		if int64(len(raw)) != want {
			return fmt.Errorf("dims %v hold %d %s elements (%d bytes), but its raw_data has %d bytes: the file is damaged or was written wrong; re-export the model", tp.GetDims(), n, dt, want, len(raw))
		}
		return nil
	}
	field, have, want := typedData(tp, dt, n)
	if have > 0 && int64(have) != want {
		return fmt.Errorf("dims %v hold %d %s elements, so %s should hold %d values, but it holds %d: the file is damaged or was written wrong; re-export the model", tp.GetDims(), n, dt, field, want, have)
	}
	return nil
}

// typedData is the typed field a tensor of type dt stores its n
// elements in, how many values it holds and how many it should.
func typedData(tp *onnxpb.TensorProto, dt graph.DType, n int64) (field string, have int, want int64) {
	switch dt {
	case graph.Float32:
		return "float_data", len(tp.GetFloatData()), n
	case graph.Complex64:
		return "float_data", len(tp.GetFloatData()), shapes.MulSat(n, 2)
	case graph.Float64:
		return "double_data", len(tp.GetDoubleData()), n
	case graph.Complex128:
		return "double_data", len(tp.GetDoubleData()), shapes.MulSat(n, 2)
	case graph.Int64:
		return "int64_data", len(tp.GetInt64Data()), n
	case graph.Uint32, graph.Uint64:
		return "uint64_data", len(tp.GetUint64Data()), n
	case graph.String:
		return "string_data", len(tp.GetStringData()), n
	case graph.Int4, graph.Uint4, graph.Float4E2M1:
		return "int32_data", len(tp.GetInt32Data()), (n + 1) / 2
	case graph.Undefined:
		return "", 0, 0
	}
	return "int32_data", len(tp.GetInt32Data()), n
}
