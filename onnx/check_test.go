package onnx

import (
	"errors"
	"strings"
	"testing"

	"github.com/opplace/opplace/onnx/onnxpb"
	"google.golang.org/protobuf/proto"
)

// TestMalformedAccepted refuses what a protobuf decoder takes but ONNX
// does not define: each case was imported silently before (issue 37).
func TestMalformedAccepted(t *testing.T) {
	relu := func() *modelBuilder {
		return newModel(17).input("x", f32, 2, 4).node("Relu", strs("x"), strs("y")).output("y")
	}
	raw := func(dt int32, dims []int64, data []byte) *modelBuilder {
		b := newModel(17).input("x", f32, 4, 1000).node("MatMul", strs("x", "w"), strs("y")).output("y")
		b.m.Graph.Initializer = append(b.m.Graph.Initializer, &onnxpb.TensorProto{Name: proto.String("w"), DataType: proto.Int32(dt), Dims: dims, RawData: data})
		return b
	}
	dtypeInput := newModel(17).input("x", 999, 2, 4).node("Relu", strs("x"), strs("y")).output("y")
	// 257 would wrap to 1 (float32) in a byte-wide type.
	wrapInit := raw(257, []int64{1000, 2}, make([]byte, 8000))
	dtypeOutput := relu()
	dtypeOutput.m.Graph.Output[0] = valueInfo("y", 999, 2, 4)
	dtypeValueInfo := relu()
	dtypeValueInfo.m.Graph.ValueInfo = append(dtypeValueInfo.m.Graph.ValueInfo, valueInfo("y", 300))
	castTo := newModel(17).input("x", f32, 2, 4).node("Cast", strs("x"), strs("y"), aInt("to", 999)).output("y")
	constBad := newModel(17).input("x", f32, 4).
		node("Constant", nil, strs("c"), aTensor("value", floatTensor("c", []int64{4}, 1, 2))).
		node("Add", strs("x", "c"), strs("y")).output("y")
	int64Short := newModel(17).input("x", f32, 2, 6).ints("s", []int64{3}, 3, 4).node("Reshape", strs("x", "s"), strs("y")).output("y")
	twice := relu()
	twice.m.OpsetImport = append(twice.m.OpsetImport, &onnxpb.OperatorSetIdProto{Domain: proto.String("ai.onnx"), Version: proto.Int64(13)})
	sameTwice := relu()
	sameTwice.m.OpsetImport = append(sameTwice.m.OpsetImport, &onnxpb.OperatorSetIdProto{Domain: proto.String("ai.onnx"), Version: proto.Int64(17)})
	fp4 := raw(23, []int64{1000, 3}, make([]byte, 1500))

	for _, tc := range []struct {
		name string
		data []byte
		want string // "" imports
	}{
		{"raw_data shorter than the dims", raw(f32, []int64{1000, 2}, make([]byte, 4)).bytes(t),
			`m.onnx: initializer "w": dims [1000 2] hold 2000 float32 elements (8000 bytes), but its raw_data has 4 bytes`},
		{"raw_data longer than the dims", raw(f32, []int64{1000, 2}, make([]byte, 8004)).bytes(t), `its raw_data has 8004 bytes`},
		{"raw_data that fits", raw(f32, []int64{1000, 2}, make([]byte, 8000)).bytes(t), ""},
		{"4-bit raw_data packs two a byte", fp4.bytes(t), ""},
		{"typed data of another count", int64Short.bytes(t),
			`initializer "s": dims [3] hold 3 int64 elements, so int64_data should hold 3 values, but it holds 2`},
		{"a Constant's tensor", constBad.bytes(t), `attribute "value": dims [4] hold 4 float32 elements, so float_data should hold 4 values, but it holds 2`},
		{"element type 999 on an input", dtypeInput.bytes(t), `graph input "x": elem_type 999 is not an ONNX tensor element type (ONNX defines 1 to 23)`},
		{"element type 257 on an initializer", wrapInit.bytes(t), `initializer "w": data_type 257 is not an ONNX tensor element type`},
		{"element type 999 on an output", dtypeOutput.bytes(t), `graph output "y": elem_type 999`},
		{"element type 300 in value_info", dtypeValueInfo.bytes(t), `value_info "y": elem_type 300`},
		{"Cast to 999", castTo.bytes(t), `node #0 (Cast): attribute "to": 999 is not an ONNX tensor element type`},
		{"ai.onnx imported twice", twice.bytes(t),
			`m.onnx: opset_import[1]: domain "ai.onnx" is imported twice, at opsets 17 and 13`},
		{"ai.onnx imported twice at one opset", sameTwice.bytes(t), ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Decode(tc.data, "m.onnx", Options{})
			if tc.want == "" {
				if err != nil {
					t.Fatal(err)
				}
				return
			}
			var ie *InputError
			if !errors.As(err, &ie) || !strings.Contains(err.Error(), tc.want) {
				t.Errorf("got %v, want an *InputError with %q", err, tc.want)
			}
		})
	}
}
