//go:build ignore

// gen writes the binary files of the bad-input corpus (the text ones are
// written by hand). Run it from the repository root:
//
//	go run testdata/bad/gen.go
//
// Every file is deterministic: the same bytes on every run.
package main

import (
	"log"
	"math/rand/v2"
	"os"
	"path/filepath"

	"google.golang.org/protobuf/proto"

	"github.com/opplace/opplace/onnx/onnxpb"
)

const dir = "testdata/bad"

func main() {
	resnet, err := os.ReadFile("testdata/models/resnet50.onnx")
	if err != nil {
		log.Fatal(err)
	}
	blazeface, err := os.ReadFile("testdata/tf/blazeface.pb")
	if err != nil {
		log.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(12, 0))
	random := make([]byte, 4096)
	for i := range random {
		random[i] = byte(rng.UintN(256))
	}
	files := map[string][]byte{
		"onnx-empty.onnx":            {},
		"onnx-truncated.onnx":        resnet[:len(resnet)/2],
		"onnx-png.onnx":              append([]byte("\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR"), make([]byte, 300)...),
		"onnx-random.onnx":           random,
		"onnx-text.onnx":             []byte("this is a README, not a model\n"),
		"onnx-bad-varint.onnx":       {0x08, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0xff, 0x01},
		"onnx-huge-length.onnx":      {0x3a, 0xff, 0xff, 0xff, 0xff, 0x0f, 0x0a},
		"onnx-no-graph.onnx":         marshal(&onnxpb.ModelProto{IrVersion: proto.Int64(8), OpsetImport: opset(17)}),
		"onnx-cycle.onnx":            marshal(cycle()),
		"onnx-dangling-input.onnx":   marshal(dangling()),
		"onnx-unknown-op.onnx":       marshal(unknownOp()),
		"onnx-negative-dim.onnx":     marshal(relu(dimsValue(-5, 4))),
		"onnx-zero-dim.onnx":         marshal(relu(dimsValue(0, 4))),
		"onnx-symbolic-dim.onnx":     marshal(relu(dimsParam("batch", 4))),
		"onnx-absurd-dims.onnx":      marshal(relu(dimsValue(1<<40, 1<<40))),
		"onnx-matmul-mismatch.onnx":  marshal(matmulMismatch()),
		"onnx-conv-channels.onnx":    marshal(convChannels()),
		"onnx-duplicate-output.onnx": marshal(duplicateOutput()),
		"onnx-future-opset.onnx":     marshal(withOpset(relu(dimsValue(2, 4)), 99)),
		"onnx-bad-attribute.onnx":    marshal(badAttribute()),
		"tf-truncated.pb":            blazeface[:len(blazeface)/3],
		"tf-random.pb":               random[:1024],

		// issue 37: importers
		"onnx-raw-data-short.onnx": marshal(rawDataShort()),
		"onnx-dtype-999.onnx":      marshal(dtype999()),
		"onnx-opset-twice.onnx":    marshal(opsetTwice()),
		"tfjs-short-weights.bin":   {3, 0, 0, 0},
	}
	for name, data := range files {
		if err := os.WriteFile(filepath.Join(dir, name), data, 0o644); err != nil {
			log.Fatal(err)
		}
	}
}

func marshal(m *onnxpb.ModelProto) []byte {
	b, err := proto.MarshalOptions{Deterministic: true}.Marshal(m)
	if err != nil {
		log.Fatal(err)
	}
	return b
}

func opset(v int64) []*onnxpb.OperatorSetIdProto {
	return []*onnxpb.OperatorSetIdProto{{Domain: proto.String(""), Version: proto.Int64(v)}}
}

func model(g *onnxpb.GraphProto) *onnxpb.ModelProto {
	return &onnxpb.ModelProto{IrVersion: proto.Int64(8), OpsetImport: opset(17), ProducerName: proto.String("opplace bad-input corpus"), Graph: g}
}

func withOpset(m *onnxpb.ModelProto, v int64) *onnxpb.ModelProto {
	m.OpsetImport = opset(v)
	return m
}

func dimsValue(ds ...int64) *onnxpb.TensorShapeProto {
	s := &onnxpb.TensorShapeProto{}
	for _, d := range ds {
		s.Dim = append(s.Dim, &onnxpb.TensorShapeProto_Dimension{Value: &onnxpb.TensorShapeProto_Dimension_DimValue{DimValue: d}})
	}
	return s
}

func dimsParam(name string, rest ...int64) *onnxpb.TensorShapeProto {
	s := dimsValue(rest...)
	s.Dim = append([]*onnxpb.TensorShapeProto_Dimension{{Value: &onnxpb.TensorShapeProto_Dimension_DimParam{DimParam: name}}}, s.Dim...)
	return s
}

func input(name string, shape *onnxpb.TensorShapeProto) *onnxpb.ValueInfoProto {
	return &onnxpb.ValueInfoProto{Name: proto.String(name), Type: &onnxpb.TypeProto{Value: &onnxpb.TypeProto_TensorType{
		TensorType: &onnxpb.TypeProto_Tensor{ElemType: proto.Int32(int32(onnxpb.TensorProto_FLOAT)), Shape: shape}}}}
}

func output(name string) *onnxpb.ValueInfoProto {
	return &onnxpb.ValueInfoProto{Name: proto.String(name)}
}

func node(op, name string, in, out []string, attrs ...*onnxpb.AttributeProto) *onnxpb.NodeProto {
	return &onnxpb.NodeProto{OpType: proto.String(op), Name: proto.String(name), Input: in, Output: out, Attribute: attrs}
}

func weight(name string, dims ...int64) *onnxpb.TensorProto {
	return &onnxpb.TensorProto{Name: proto.String(name), DataType: proto.Int32(int32(onnxpb.TensorProto_FLOAT)), Dims: dims,
		DataLocation: onnxpb.TensorProto_EXTERNAL.Enum(),
		ExternalData: []*onnxpb.StringStringEntryProto{{Key: proto.String("location"), Value: proto.String("weights.bin")}}}
}

// relu is the smallest model: one Relu of an input of the given shape.
func relu(shape *onnxpb.TensorShapeProto) *onnxpb.ModelProto {
	return model(&onnxpb.GraphProto{Name: proto.String("relu"),
		Input:  []*onnxpb.ValueInfoProto{input("x", shape)},
		Node:   []*onnxpb.NodeProto{node("Relu", "relu", []string{"x"}, []string{"y"})},
		Output: []*onnxpb.ValueInfoProto{output("y")}})
}

// cycle has two nodes feeding each other.
func cycle() *onnxpb.ModelProto {
	return model(&onnxpb.GraphProto{Name: proto.String("cycle"),
		Input: []*onnxpb.ValueInfoProto{input("x", dimsValue(2, 4))},
		Node: []*onnxpb.NodeProto{
			node("Add", "add", []string{"x", "b"}, []string{"a"}),
			node("Relu", "relu", []string{"a"}, []string{"b"}),
		},
		Output: []*onnxpb.ValueInfoProto{output("a")}})
}

// dangling reads a tensor no node, input or initializer makes.
func dangling() *onnxpb.ModelProto {
	return model(&onnxpb.GraphProto{Name: proto.String("dangling"),
		Input:  []*onnxpb.ValueInfoProto{input("x", dimsValue(2, 4))},
		Node:   []*onnxpb.NodeProto{node("Add", "add", []string{"x", "nowhere"}, []string{"y"})},
		Output: []*onnxpb.ValueInfoProto{output("y")}})
}

// unknownOp has an op type no ONNX opset defines between two known ones.
func unknownOp() *onnxpb.ModelProto {
	return model(&onnxpb.GraphProto{Name: proto.String("unknown"),
		Input:       []*onnxpb.ValueInfoProto{input("x", dimsValue(8, 64))},
		Initializer: []*onnxpb.TensorProto{weight("w", 64, 64)},
		Node: []*onnxpb.NodeProto{
			node("MatMul", "mm", []string{"x", "w"}, []string{"h"}),
			node("FancyActivation", "fancy", []string{"h"}, []string{"a"}),
			node("Relu", "relu", []string{"a"}, []string{"y"}),
		},
		Output: []*onnxpb.ValueInfoProto{output("y")}})
}

func matmulMismatch() *onnxpb.ModelProto {
	return model(&onnxpb.GraphProto{Name: proto.String("matmul"),
		Input:       []*onnxpb.ValueInfoProto{input("x", dimsValue(2, 3))},
		Initializer: []*onnxpb.TensorProto{weight("w", 4, 5)},
		Node:        []*onnxpb.NodeProto{node("MatMul", "mm", []string{"x", "w"}, []string{"y"})},
		Output:      []*onnxpb.ValueInfoProto{output("y")}})
}

func ints(name string, v ...int64) *onnxpb.AttributeProto {
	return &onnxpb.AttributeProto{Name: proto.String(name), Type: onnxpb.AttributeProto_INTS.Enum(), Ints: v}
}

func convChannels() *onnxpb.ModelProto {
	return model(&onnxpb.GraphProto{Name: proto.String("conv"),
		Input:       []*onnxpb.ValueInfoProto{input("x", dimsValue(1, 3, 32, 32))},
		Initializer: []*onnxpb.TensorProto{weight("w", 16, 8, 3, 3)},
		Node:        []*onnxpb.NodeProto{node("Conv", "conv", []string{"x", "w"}, []string{"y"}, ints("kernel_shape", 3, 3))},
		Output:      []*onnxpb.ValueInfoProto{output("y")}})
}

func duplicateOutput() *onnxpb.ModelProto {
	return model(&onnxpb.GraphProto{Name: proto.String("dup"),
		Input: []*onnxpb.ValueInfoProto{input("x", dimsValue(2, 4))},
		Node: []*onnxpb.NodeProto{
			node("Relu", "relu", []string{"x"}, []string{"y"}),
			node("Sigmoid", "sigmoid", []string{"x"}, []string{"y"}),
		},
		Output: []*onnxpb.ValueInfoProto{output("y")}})
}

// badAttribute gives Conv's kernel_shape as a string.
func badAttribute() *onnxpb.ModelProto {
	m := convChannels()
	m.Graph.Initializer[0].Dims = []int64{16, 3, 3, 3}
	m.Graph.Node[0].Attribute = []*onnxpb.AttributeProto{{Name: proto.String("kernel_shape"), Type: onnxpb.AttributeProto_STRING.Enum(), S: []byte("3x3")}}
	return m
}

// issue 37: importers

// rawDataShort stores 4 bytes of raw_data for an initializer of 1,000
// float32 elements.
func rawDataShort() *onnxpb.ModelProto {
	return model(&onnxpb.GraphProto{Name: proto.String("raw"),
		Input: []*onnxpb.ValueInfoProto{input("x", dimsValue(1000))},
		Initializer: []*onnxpb.TensorProto{{Name: proto.String("w"), DataType: proto.Int32(int32(onnxpb.TensorProto_FLOAT)),
			Dims: []int64{1000}, RawData: []byte{0, 0, 128, 63}}},
		Node:   []*onnxpb.NodeProto{node("Add", "add", []string{"x", "w"}, []string{"y"})},
		Output: []*onnxpb.ValueInfoProto{output("y")}})
}

// dtype999 declares its input of element type 999, which ONNX does not
// define.
func dtype999() *onnxpb.ModelProto {
	m := relu(dimsValue(2, 4))
	m.Graph.Input[0].Type.GetTensorType().ElemType = proto.Int32(999)
	return m
}

// opsetTwice imports ai.onnx at opsets 17 and 13.
func opsetTwice() *onnxpb.ModelProto {
	m := relu(dimsValue(2, 4))
	m.OpsetImport = append(m.OpsetImport, &onnxpb.OperatorSetIdProto{Domain: proto.String("ai.onnx"), Version: proto.Int64(13)})
	return m
}
