package onnx

import (
	"strconv"

	"github.com/opplace/opplace/onnx/onnxpb"
)

// declaredDims are an ONNX input's declared dimensions as ShapeRankError
// writes them.
func declaredDims(s *onnxpb.TensorShapeProto) []string {
	out := make([]string, len(s.GetDim()))
	for i, d := range s.GetDim() {
		switch x := d.GetValue().(type) {
		case *onnxpb.TensorShapeProto_Dimension_DimValue:
			out[i] = strconv.FormatInt(x.DimValue, 10)
		case *onnxpb.TensorShapeProto_Dimension_DimParam:
			out[i] = x.DimParam
		default:
			out[i] = "?"
		}
	}
	return out
}
