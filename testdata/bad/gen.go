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
	"maps"
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
		"onnx-no-weights.onnx":       marshal(relu(dimsValue(8, 16))),
		"onnx-constant-weights.onnx": marshal(constantWeights()),
		"tf-truncated.pb":            blazeface[:len(blazeface)/3],
		"tf-random.pb":               random[:1024],

		// issue 37: importers
		"onnx-raw-data-short.onnx": marshal(rawDataShort()),
		"onnx-dtype-999.onnx":      marshal(dtype999()),
		"onnx-opset-twice.onnx":    marshal(opsetTwice()),
		"tfjs-short-weights.bin":   {3, 0, 0, 0},
	}
	maps.Copy(files, messages37())
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

// constantWeights stores a Conv's weight and bias as Constant nodes, as
// exports made for inference do, beside a scalar Constant (a buffer).
func constantWeights() *onnxpb.ModelProto {
	constant := func(name string, t *onnxpb.TensorProto) *onnxpb.NodeProto {
		return node("Constant", name, nil, []string{name}, &onnxpb.AttributeProto{Name: proto.String("value"), Type: onnxpb.AttributeProto_TENSOR.Enum(), T: t})
	}
	return model(&onnxpb.GraphProto{Name: proto.String("conv"),
		Input: []*onnxpb.ValueInfoProto{input("x", dimsValue(1, 3, 32, 32))},
		Node: []*onnxpb.NodeProto{
			constant("w", weight("w", 16, 3, 3, 3)),
			constant("b", weight("b", 16)),
			constant("half", &onnxpb.TensorProto{Name: proto.String("half"), DataType: proto.Int32(int32(onnxpb.TensorProto_FLOAT)), FloatData: []float32{0.5}}),
			node("Conv", "conv", []string{"x", "w", "b"}, []string{"c"}, ints("kernel_shape", 3, 3)),
			node("Mul", "mul", []string{"c", "half"}, []string{"y"}),
		},
		Output: []*onnxpb.ValueInfoProto{output("y")}})
}

// issue 37: messages

// messages37 are the files of the cases whose message used to point the
// wrong way: a Loop trip count past 2^31 called not constant, an
// initializer that clashes with the graph input it gives a default
// called a MatMul mismatch, empty .pb and .json files called not ONNX,
// an empty profile called not a profile (EOF).
func messages37() map[string][]byte {
	return map[string][]byte{
		"onnx-loop-huge-trips.onnx":   marshal(hugeLoop(3_000_000_000)),
		"onnx-initializer-clash.onnx": marshal(initializerClash()),
		"tf-empty.pb":                 {},
		"tfjs-empty.json":             {},
		"profile-empty.json":          {},
	}
}

func scalarValue(name string, dt onnxpb.TensorProto_DataType) *onnxpb.ValueInfoProto {
	return &onnxpb.ValueInfoProto{Name: proto.String(name), Type: &onnxpb.TypeProto{Value: &onnxpb.TypeProto_TensorType{
		TensorType: &onnxpb.TypeProto_Tensor{ElemType: proto.Int32(int32(dt)), Shape: dimsValue()}}}}
}

func constant(name string, t *onnxpb.TensorProto) *onnxpb.NodeProto {
	return node("Constant", name, nil, []string{name}, &onnxpb.AttributeProto{Name: proto.String("value"), Type: onnxpb.AttributeProto_TENSOR.Enum(), T: t})
}

// hugeLoop is a Loop of constant trip count m over a Relu of a 2×4
// accumulator.
func hugeLoop(m int64) *onnxpb.ModelProto {
	body := &onnxpb.GraphProto{Name: proto.String("body"),
		Input: []*onnxpb.ValueInfoProto{scalarValue("i", onnxpb.TensorProto_INT64), scalarValue("cond", onnxpb.TensorProto_BOOL), input("acc", dimsValue(2, 4))},
		Node: []*onnxpb.NodeProto{
			node("Identity", "keep", []string{"cond"}, []string{"cond_out"}),
			node("Relu", "step", []string{"acc"}, []string{"acc_out"}),
		},
		Output: []*onnxpb.ValueInfoProto{output("cond_out"), output("acc_out")}}
	return model(&onnxpb.GraphProto{Name: proto.String("loop"),
		Input: []*onnxpb.ValueInfoProto{input("x", dimsValue(2, 4))},
		Node: []*onnxpb.NodeProto{
			constant("trips", &onnxpb.TensorProto{DataType: proto.Int32(int32(onnxpb.TensorProto_INT64)), Int64Data: []int64{m}}),
			constant("go", &onnxpb.TensorProto{DataType: proto.Int32(int32(onnxpb.TensorProto_BOOL)), Int32Data: []int32{1}}),
			node("Loop", "loop", []string{"trips", "go", "x"}, []string{"y"}, &onnxpb.AttributeProto{Name: proto.String("body"), Type: onnxpb.AttributeProto_GRAPH.Enum(), G: body}),
		},
		Output: []*onnxpb.ValueInfoProto{output("y")}})
}

// initializerClash declares graph input w as 4×3 and gives it an 8×8
// initializer as its default (IR < 4 style), read by a MatMul.
func initializerClash() *onnxpb.ModelProto {
	m := model(&onnxpb.GraphProto{Name: proto.String("clash"),
		Input:       []*onnxpb.ValueInfoProto{input("x", dimsValue(2, 4)), input("w", dimsValue(4, 3))},
		Initializer: []*onnxpb.TensorProto{weight("w", 8, 8)},
		Node:        []*onnxpb.NodeProto{node("MatMul", "mm", []string{"x", "w"}, []string{"y"})},
		Output:      []*onnxpb.ValueInfoProto{output("y")}})
	m.IrVersion = proto.Int64(3)
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
