package onnx

import (
	"testing"

	"github.com/opplace/opplace/onnx/onnxpb"
	"google.golang.org/protobuf/proto"
)

// modelBuilder assembles small ModelProtos for tests.
type modelBuilder struct {
	m *onnxpb.ModelProto
}

const f32, i64 = int32(onnxpb.TensorProto_FLOAT), int32(onnxpb.TensorProto_INT64)

func newModel(opset int64) *modelBuilder {
	return &modelBuilder{m: &onnxpb.ModelProto{
		IrVersion:   proto.Int64(8),
		OpsetImport: []*onnxpb.OperatorSetIdProto{{Domain: proto.String(""), Version: proto.Int64(opset)}},
		Graph:       &onnxpb.GraphProto{Name: proto.String("test")},
	}}
}

func valueInfo(name string, dt int32, dims ...int64) *onnxpb.ValueInfoProto {
	shape := &onnxpb.TensorShapeProto{}
	for _, d := range dims {
		shape.Dim = append(shape.Dim, &onnxpb.TensorShapeProto_Dimension{Value: &onnxpb.TensorShapeProto_Dimension_DimValue{DimValue: d}})
	}
	return &onnxpb.ValueInfoProto{Name: proto.String(name), Type: &onnxpb.TypeProto{Value: &onnxpb.TypeProto_TensorType{
		TensorType: &onnxpb.TypeProto_Tensor{ElemType: proto.Int32(dt), Shape: shape}}}}
}

// symInput adds an input whose dims are given as names (symbolic) or
// numbers.
func (b *modelBuilder) symInput(name string, dt int32, dims ...any) *modelBuilder {
	vi := valueInfo(name, dt)
	for _, d := range dims {
		dim := &onnxpb.TensorShapeProto_Dimension{}
		switch x := d.(type) {
		case string:
			dim.Value = &onnxpb.TensorShapeProto_Dimension_DimParam{DimParam: x}
		case int:
			dim.Value = &onnxpb.TensorShapeProto_Dimension_DimValue{DimValue: int64(x)}
		}
		vi.Type.GetTensorType().Shape.Dim = append(vi.Type.GetTensorType().Shape.Dim, dim)
	}
	b.m.Graph.Input = append(b.m.Graph.Input, vi)
	return b
}

func (b *modelBuilder) input(name string, dt int32, dims ...int64) *modelBuilder {
	b.m.Graph.Input = append(b.m.Graph.Input, valueInfo(name, dt, dims...))
	return b
}

func (b *modelBuilder) output(name string) *modelBuilder {
	b.m.Graph.Output = append(b.m.Graph.Output, &onnxpb.ValueInfoProto{Name: proto.String(name)})
	return b
}

// weight adds a float initializer whose data lives in an absent file.
func (b *modelBuilder) weight(name string, dims ...int64) *modelBuilder {
	b.m.Graph.Initializer = append(b.m.Graph.Initializer, &onnxpb.TensorProto{
		Name: proto.String(name), DataType: proto.Int32(f32), Dims: dims,
		DataLocation: onnxpb.TensorProto_EXTERNAL.Enum(),
		ExternalData: []*onnxpb.StringStringEntryProto{{Key: proto.String("location"), Value: proto.String("absent.bin")}},
	})
	return b
}

// ints adds an int64 initializer with inline data.
func (b *modelBuilder) ints(name string, dims []int64, data ...int64) *modelBuilder {
	b.m.Graph.Initializer = append(b.m.Graph.Initializer, intTensor(name, dims, data...))
	return b
}

func intTensor(name string, dims []int64, data ...int64) *onnxpb.TensorProto {
	return &onnxpb.TensorProto{Name: proto.String(name), DataType: proto.Int32(i64), Dims: dims, Int64Data: data}
}

func floatTensor(name string, dims []int64, data ...float32) *onnxpb.TensorProto {
	return &onnxpb.TensorProto{Name: proto.String(name), DataType: proto.Int32(f32), Dims: dims, FloatData: data}
}

func (b *modelBuilder) node(op string, ins, outs []string, attrs ...*onnxpb.AttributeProto) *modelBuilder {
	b.m.Graph.Node = append(b.m.Graph.Node, &onnxpb.NodeProto{OpType: proto.String(op), Input: ins, Output: outs, Attribute: attrs})
	return b
}

// domainNode adds a node of another domain (and imports it).
func (b *modelBuilder) domainNode(domain, op string, ins, outs []string, attrs ...*onnxpb.AttributeProto) *modelBuilder {
	b.node(op, ins, outs, attrs...)
	b.m.Graph.Node[len(b.m.Graph.Node)-1].Domain = proto.String(domain)
	b.m.OpsetImport = append(b.m.OpsetImport, &onnxpb.OperatorSetIdProto{Domain: proto.String(domain), Version: proto.Int64(1)})
	return b
}

func (b *modelBuilder) bytes(t testing.TB) []byte {
	t.Helper()
	data, err := proto.Marshal(b.m)
	if err != nil {
		t.Fatal(err)
	}
	return data
}

func aInt(name string, v int64) *onnxpb.AttributeProto {
	return &onnxpb.AttributeProto{Name: proto.String(name), Type: onnxpb.AttributeProto_INT.Enum(), I: proto.Int64(v)}
}

func aInts(name string, v ...int64) *onnxpb.AttributeProto {
	return &onnxpb.AttributeProto{Name: proto.String(name), Type: onnxpb.AttributeProto_INTS.Enum(), Ints: v}
}

func aStr(name, v string) *onnxpb.AttributeProto {
	return &onnxpb.AttributeProto{Name: proto.String(name), Type: onnxpb.AttributeProto_STRING.Enum(), S: []byte(v)}
}

func aTensor(name string, t *onnxpb.TensorProto) *onnxpb.AttributeProto {
	return &onnxpb.AttributeProto{Name: proto.String(name), Type: onnxpb.AttributeProto_TENSOR.Enum(), T: t}
}

func aGraph(name string, g *onnxpb.GraphProto) *onnxpb.AttributeProto {
	return &onnxpb.AttributeProto{Name: proto.String(name), Type: onnxpb.AttributeProto_GRAPH.Enum(), G: g}
}

func strs(s ...string) []string { return s }
