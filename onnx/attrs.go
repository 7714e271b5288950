package onnx

import (
	"encoding/binary"
	"fmt"
	"math"

	"github.com/opplace/opplace/graph"
	"github.com/opplace/opplace/internal/shapes"
	"github.com/opplace/opplace/onnx/onnxpb"
)

// attrs converts a node's attributes. Graph-valued attributes (control
// flow bodies) are built as nested graphs that can see the names visible
// in the enclosing graph.
func (c *converter) attrs(n *onnxpb.NodeProto, visible lookup) (graph.Attrs, map[string]*subgraph, error) {
	if len(n.GetAttribute()) == 0 {
		return nil, nil, nil
	}
	out := make(graph.Attrs, len(n.GetAttribute()))
	var subs map[string]*subgraph
	for _, a := range n.GetAttribute() {
		if err := checkAttrType(n, a); err != nil {
			return nil, nil, err
		}
		var at graph.Attr
		switch a.GetType() {
		case onnxpb.AttributeProto_INT:
			at = graph.Attr{Kind: graph.AttrInt, Int: a.GetI()}
		case onnxpb.AttributeProto_FLOAT:
			at = graph.Attr{Kind: graph.AttrFloat, Float: float64(a.GetF())}
		case onnxpb.AttributeProto_STRING:
			at = graph.Attr{Kind: graph.AttrString, String: string(a.GetS())}
		case onnxpb.AttributeProto_INTS:
			at = graph.Attr{Kind: graph.AttrInts, Ints: a.GetInts()}
		case onnxpb.AttributeProto_FLOATS:
			fs := make([]float64, len(a.GetFloats()))
			for i, f := range a.GetFloats() {
				fs[i] = float64(f)
			}
			at = graph.Attr{Kind: graph.AttrFloats, Floats: fs}
		case onnxpb.AttributeProto_STRINGS:
			ss := make([]string, len(a.GetStrings()))
			for i, s := range a.GetStrings() {
				ss[i] = string(s)
			}
			at = graph.Attr{Kind: graph.AttrStrings, Strings: ss}
		case onnxpb.AttributeProto_TENSOR, onnxpb.AttributeProto_SPARSE_TENSOR:
			tp := a.GetT()
			if a.GetType() == onnxpb.AttributeProto_SPARSE_TENSOR {
				tp = &onnxpb.TensorProto{Dims: a.GetSparseTensor().GetDims(), DataType: a.GetSparseTensor().GetValues().DataType}
			}
			v, err := tensorValue(tp)
			if err != nil {
				return nil, nil, fmt.Errorf("attribute %q: %v", a.GetName(), err)
			}
			at = graph.Attr{Kind: graph.AttrTensor, Tensor: &graph.Tensor{Name: tp.GetName(), DType: v.dtype,
				Shape: shapes.Clone(v.shape), ShapeKnown: true, Kind: graph.Constant}}
			if v.hasInts() {
				at.TensorInts = shapes.Clone(v.ints)
			} else if v.hasFloats() {
				c.constFloats[at.Tensor] = v.floats
			}
		case onnxpb.AttributeProto_GRAPH, onnxpb.AttributeProto_GRAPHS:
			gps := a.GetGraphs()
			kind := graph.AttrGraphs
			if a.GetType() == onnxpb.AttributeProto_GRAPH {
				gps = []*onnxpb.GraphProto{a.GetG()}
				kind = graph.AttrGraph
			}
			at = graph.Attr{Kind: kind}
			for i, gp := range gps {
				if gp == nil {
					return nil, nil, fmt.Errorf("attribute %q has no graph", a.GetName())
				}
				sg, err := c.build(gp, visible, false)
				if err != nil {
					return nil, nil, fmt.Errorf("subgraph %q: %v", a.GetName(), err)
				}
				if subs == nil {
					subs = map[string]*subgraph{}
				}
				key := a.GetName()
				if len(gps) > 1 {
					key = fmt.Sprintf("%s[%d]", key, i)
				}
				subs[key] = sg
				at.Graphs = append(at.Graphs, sg.g)
			}
		default:
			// Type protos and unset kinds carry nothing inference uses.
			continue
		}
		out[a.GetName()] = at
	}
	return out, subs, nil
}

// standardAttrTypes are the types of attributes that every ai.onnx
// operator declaring them gives the same type (ONNX's Operators.md, opset
// 1 to 23). A graph reader takes an attribute of another type for absent,
// so a malformed one would silently fall back to the default (a Conv
// whose kernel_shape is a string is shaped from its weight and padded
// as if it had no pads): such a model is refused instead.
var standardAttrTypes = map[string]onnxpb.AttributeProto_AttributeType{
	"axis": onnxpb.AttributeProto_INT, "group": onnxpb.AttributeProto_INT, "keepdims": onnxpb.AttributeProto_INT,
	"transA": onnxpb.AttributeProto_INT, "transB": onnxpb.AttributeProto_INT, "ceil_mode": onnxpb.AttributeProto_INT,
	"count_include_pad": onnxpb.AttributeProto_INT, "to": onnxpb.AttributeProto_INT, "hidden_size": onnxpb.AttributeProto_INT,
	"blocksize": onnxpb.AttributeProto_INT, "noop_with_empty_axes": onnxpb.AttributeProto_INT,
	"kernel_shape": onnxpb.AttributeProto_INTS, "strides": onnxpb.AttributeProto_INTS, "pads": onnxpb.AttributeProto_INTS,
	"dilations": onnxpb.AttributeProto_INTS, "perm": onnxpb.AttributeProto_INTS, "output_padding": onnxpb.AttributeProto_INTS,
	"output_shape": onnxpb.AttributeProto_INTS,
	"epsilon":      onnxpb.AttributeProto_FLOAT, "momentum": onnxpb.AttributeProto_FLOAT,
	"auto_pad": onnxpb.AttributeProto_STRING, "direction": onnxpb.AttributeProto_STRING, "equation": onnxpb.AttributeProto_STRING,
}

// checkAttrType refuses a standard attribute of an ai.onnx node that has
// the wrong type.
func checkAttrType(n *onnxpb.NodeProto, a *onnxpb.AttributeProto) error {
	if d := normDomain(n.GetDomain()); d != "" {
		return nil // other domains define their own attributes
	}
	want, ok := standardAttrTypes[a.GetName()]
	if (a.GetName() == "to" || a.GetName() == "dtype") && a.GetType() == onnxpb.AttributeProto_INT {
		if err := checkElemType(a.GetI()); err != nil {
			return fmt.Errorf("attribute %q: %v", a.GetName(), err)
		}
	}
	if !ok || a.GetType() == want || a.GetType() == onnxpb.AttributeProto_UNDEFINED {
		return nil
	}
	return fmt.Errorf("attribute %q is a %s, but ONNX defines it as %s: the exporter wrote a malformed model; re-export it", a.GetName(), a.GetType(), want)
}

// tensorValue reads a TensorProto's type and dimensions and, for small
// tensors stored inline, its contents. External data is never read.
func tensorValue(tp *onnxpb.TensorProto) (*value, error) {
	dims := shapes.Clone(tp.GetDims())
	if err := checkShape(dims); err != nil {
		return nil, err
	}
	if err := checkTensor(tp); err != nil {
		return nil, err
	}
	v := &value{dtype: graph.DType(tp.GetDataType()), shape: dims, known: true}
	n := shapes.Prod(dims)
	if n > maxFold || tp.GetDataLocation() == onnxpb.TensorProto_EXTERNAL {
		return v, nil
	}
	raw := tp.GetRawData()
	switch v.dtype {
	case graph.Int64:
		switch {
		case len(tp.GetInt64Data()) == int(n):
			v.ints = shapes.Clone(tp.GetInt64Data())
		case len(raw) == int(n)*8:
			v.ints = make([]int64, n)
			for i := range v.ints {
				v.ints[i] = int64(binary.LittleEndian.Uint64(raw[i*8:]))
			}
		}
	case graph.Int32, graph.Int16, graph.Int8, graph.Uint8, graph.Uint16, graph.Bool:
		size := int(v.dtype.Size())
		switch {
		case len(tp.GetInt32Data()) == int(n):
			v.ints = make([]int64, n)
			for i, x := range tp.GetInt32Data() {
				v.ints[i] = int64(x)
			}
		case len(raw) == int(n)*size:
			v.ints = make([]int64, n)
			for i := range v.ints {
				b := raw[i*size:]
				switch v.dtype {
				case graph.Int32:
					v.ints[i] = int64(int32(binary.LittleEndian.Uint32(b)))
				case graph.Int16:
					v.ints[i] = int64(int16(binary.LittleEndian.Uint16(b)))
				case graph.Uint16:
					v.ints[i] = int64(binary.LittleEndian.Uint16(b))
				case graph.Int8:
					v.ints[i] = int64(int8(b[0]))
				default:
					v.ints[i] = int64(b[0])
				}
			}
		}
	case graph.Uint32, graph.Uint64:
		switch {
		case len(tp.GetUint64Data()) == int(n):
			v.ints = make([]int64, n)
			for i, x := range tp.GetUint64Data() {
				v.ints[i] = int64(x)
			}
		case len(raw) == int(n)*int(v.dtype.Size()):
			v.ints = make([]int64, n)
			for i := range v.ints {
				if v.dtype == graph.Uint32 {
					v.ints[i] = int64(binary.LittleEndian.Uint32(raw[i*4:]))
				} else {
					v.ints[i] = int64(binary.LittleEndian.Uint64(raw[i*8:]))
				}
			}
		}
	case graph.Float32:
		switch {
		case len(tp.GetFloatData()) == int(n):
			v.floats = make([]float64, n)
			for i, x := range tp.GetFloatData() {
				v.floats[i] = float64(x)
			}
		case len(raw) == int(n)*4:
			v.floats = make([]float64, n)
			for i := range v.floats {
				v.floats[i] = float64(math.Float32frombits(binary.LittleEndian.Uint32(raw[i*4:])))
			}
		}
	case graph.Float64:
		switch {
		case len(tp.GetDoubleData()) == int(n):
			v.floats = clone64(tp.GetDoubleData())
		case len(raw) == int(n)*8:
			v.floats = make([]float64, n)
			for i := range v.floats {
				v.floats[i] = math.Float64frombits(binary.LittleEndian.Uint64(raw[i*8:]))
			}
		}
	}
	return v, nil
}

func clone64(s []float64) []float64 { return append([]float64(nil), s...) }
