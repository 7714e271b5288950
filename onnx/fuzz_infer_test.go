package onnx

import (
	"fmt"
	"testing"
	"time"

	"github.com/opplace/opplace/onnx/onnxpb"
	"google.golang.org/protobuf/proto"
)

// FuzzInfer fuzzes shape inference itself rather than the protobuf
// decoder: every input is a well-formed model, so the bytes reach the
// infer functions. sel picks either a hand-built model (the shape cases
// and the control-flow models), which spec then mutates — input
// dimensions, attribute values, integer initializers, added attributes,
// dropped inputs — or one registered op, which spec instantiates with
// generated inputs and attributes. Import must not panic, must fail only
// with an *InputError, and must produce valid shapes and non-negative
// work. Run it with
//
//	go test ./onnx -run '^$' -fuzz FuzzInfer -fuzztime 2m -fuzzminimizetime 3s
func FuzzInfer(f *testing.F) {
	var bases []*onnxpb.ModelProto
	for _, tc := range shapeCases() {
		bases = append(bases, tc.model.m)
	}
	for _, b := range []*modelBuilder{ifModel(""), ifModel("true"), loopModel(5), loopModel(-1), scanModel()} {
		bases = append(bases, b.m)
	}
	ops := Supported()
	for i := range bases {
		f.Add(uint16(i), []byte{0})
		f.Add(uint16(i), []byte{1, 0, 0, 0, 0, 1, 0, 0, 3, 1, 0, 2, 5})
	}
	for j := range ops {
		// Two float inputs of shape 2×3×4×5 and a rank-1 int64 constant.
		f.Add(uint16(len(bases)+j), []byte{0, 3, 0, 4, 2, 3, 4, 5, 0, 4, 2, 3, 4, 5, 1, 2, 1, 2, 1, 1, 0, 1})
	}
	f.Fuzz(func(t *testing.T, sel uint16, spec []byte) {
		r := &fuzzReader{b: spec}
		opts := Options{Dims: map[string]int64{"batch": 2}, LoopTrips: int64(r.next() % 4),
			IfBranch: []string{"", IfMax, IfThen, IfElse}[r.next()%4]}
		var mp *onnxpb.ModelProto
		if k := int(sel) % (len(bases) + len(ops)); k < len(bases) {
			mp = proto.Clone(bases[k]).(*onnxpb.ModelProto)
			mutateModel(mp, r)
		} else {
			mp = singleOpModel(ops[k-len(bases)], r)
		}
		data, err := proto.Marshal(mp)
		if err != nil {
			t.Skip(err)
		}
		st := time.Now()
		m, err := Decode(data, "fuzz.onnx", opts)
		if d := time.Since(st); d > 5*time.Second {
			t.Fatalf("SLOW %v", d)
		}
		checkImport(t, m, err)
	})
}

// scanModel is a Scan summing the rows of a 6×4 input into a 4-vector
// state, emitting each partial sum.
func scanModel() *modelBuilder {
	body := &onnxpb.GraphProto{Name: proto.String("body"),
		Input:  []*onnxpb.ValueInfoProto{valueInfo("s", f32, 4), valueInfo("row", f32, 4)},
		Node:   []*onnxpb.NodeProto{{OpType: proto.String("Add"), Input: strs("s", "row"), Output: strs("s2")}},
		Output: []*onnxpb.ValueInfoProto{{Name: proto.String("s2")}, {Name: proto.String("s2")}}}
	return newModel(17).input("init", f32, 4).input("xs", f32, 6, 4).
		node("Scan", strs("init", "xs"), strs("sum", "partial"), aGraph("body", body), aInt("num_scan_inputs", 1)).
		output("sum").output("partial")
}

// fuzzReader hands out the fuzzer's bytes, then zeros.
type fuzzReader struct {
	b []byte
	i int
}

func (r *fuzzReader) next() byte {
	if r.i >= len(r.b) {
		return 0
	}
	r.i++
	return r.b[r.i-1]
}

func (r *fuzzReader) more() bool { return r.i < len(r.b) }

// small returns a signed value in [-128, 127]: shape arithmetic's edge
// cases (0, -1, negative axes) live there.
func (r *fuzzReader) small() int64 { return int64(int8(r.next())) }

// fuzzAttrNames are the attributes the infer functions read.
var fuzzAttrNames = []string{"allowzero", "auto_pad", "axes", "axis", "batch_dims", "blocksize", "ceil_mode",
	"dilations", "direction", "dtype", "end", "ends", "equation", "group", "hidden_size", "k", "keepdims",
	"kernel_shape", "layout", "mode", "noop_with_empty_axes", "num_heads", "num_outputs", "num_scan_inputs",
	"onesided", "output_padding", "output_shape", "pads", "perm", "scan_input_axes", "scan_output_axes",
	"shape", "size", "split", "start", "starts", "strides", "to", "transA", "transB", "sizes", "scales",
	"output_height", "output_width", "sampling_ratio", "sample_size", "reduction", "stash_type", "value"}

// fuzzStrings are string attribute values the infer functions branch on.
var fuzzStrings = []string{"NOTSET", "SAME_UPPER", "SAME_LOWER", "VALID", "bidirectional", "reverse",
	"forward", "DCR", "CRD", "linear", "nearest", "cubic", "bij,bjk->bik", "ij->ji", "...i,...i->...",
	"i,i", "ii->i", "ab,bc", "mean", "sum", "none", "not_larger", "not_smaller", ""}

// fuzzAttr makes an attribute of a fuzzed kind and value.
func fuzzAttr(r *fuzzReader, name string) *onnxpb.AttributeProto {
	switch r.next() % 5 {
	case 0, 1:
		return aInt(name, r.small())
	case 2:
		vals := make([]int64, r.next()%7)
		for i := range vals {
			vals[i] = r.small()
		}
		return aInts(name, vals...)
	case 3:
		return aStr(name, fuzzStrings[int(r.next())%len(fuzzStrings)])
	default:
		if name == "value" {
			return aTensor(name, intTensor("", []int64{int64(r.next() % 4)}, r.small(), r.small(), r.small()))
		}
		return &onnxpb.AttributeProto{Name: proto.String(name), Type: onnxpb.AttributeProto_FLOAT.Enum(),
			F: proto.Float32(float32(r.small()) / 4)}
	}
}

// allNodes lists the nodes of g and of the graphs nested in them.
func allNodes(g *onnxpb.GraphProto) []*onnxpb.NodeProto {
	var out []*onnxpb.NodeProto
	for _, n := range g.GetNode() {
		out = append(out, n)
		for _, a := range n.GetAttribute() {
			if a.GetG() != nil {
				out = append(out, allNodes(a.GetG())...)
			}
			for _, sub := range a.GetGraphs() {
				out = append(out, allNodes(sub)...)
			}
		}
	}
	return out
}

// mutateModel applies up to 16 mutations read from r.
func mutateModel(mp *onnxpb.ModelProto, r *fuzzReader) {
	g := mp.GetGraph()
	nodes := allNodes(g)
	for k := 0; k < 16 && r.more(); k++ {
		kind, a, b := r.next()%6, int(r.next()), int(r.next())
		v := r.small()
		switch kind {
		case 0: // an input dimension: changed, or a new axis
			if len(g.Input) == 0 {
				continue
			}
			tt := g.Input[a%len(g.Input)].GetType().GetTensorType()
			if tt == nil || tt.Shape == nil {
				continue
			}
			dim := &onnxpb.TensorShapeProto_Dimension{Value: &onnxpb.TensorShapeProto_Dimension_DimValue{DimValue: v}}
			if v == -128 {
				dim.Value = &onnxpb.TensorShapeProto_Dimension_DimParam{DimParam: "batch"}
			}
			if d := tt.Shape.Dim; len(d) > 0 && b < 200 {
				d[b%len(d)] = dim
			} else if len(d) < 8 {
				tt.Shape.Dim = append(tt.Shape.Dim, dim)
			}
		case 1: // an existing attribute's value
			n := nodes[a%len(nodes)]
			if len(n.Attribute) == 0 {
				continue
			}
			at := n.Attribute[b%len(n.Attribute)]
			switch at.GetType() {
			case onnxpb.AttributeProto_INT:
				at.I = proto.Int64(v)
			case onnxpb.AttributeProto_INTS:
				if len(at.Ints) > 0 && b < 200 {
					at.Ints[b%len(at.Ints)] = v
				} else {
					at.Ints = append(at.Ints, v)
				}
			case onnxpb.AttributeProto_FLOAT:
				at.F = proto.Float32(float32(v))
			case onnxpb.AttributeProto_STRING:
				at.S = []byte(fuzzStrings[b%len(fuzzStrings)])
			}
		case 2: // an integer initializer's contents
			var ints []*onnxpb.TensorProto
			for _, in := range g.Initializer {
				if len(in.Int64Data) > 0 {
					ints = append(ints, in)
				}
			}
			if len(ints) > 0 {
				in := ints[a%len(ints)]
				in.Int64Data[b%len(in.Int64Data)] = v
			}
		case 3: // a new attribute
			n := nodes[a%len(nodes)]
			n.Attribute = append(n.Attribute, fuzzAttr(r, fuzzAttrNames[b%len(fuzzAttrNames)]))
		case 4: // an input dropped (optional inputs are "")
			n := nodes[a%len(nodes)]
			if len(n.Input) > 0 {
				if v < 0 {
					n.Input = n.Input[:b%len(n.Input)]
				} else {
					n.Input[b%len(n.Input)] = ""
				}
			}
		case 5: // an opset change
			mp.OpsetImport[0].Version = proto.Int64(int64(1 + a%23))
		}
	}
}

// singleOpModel builds a model of one node of the registered op
// ("domain:type") with inputs, attributes and outputs read from r.
func singleOpModel(op string, r *fuzzReader) *onnxpb.ModelProto {
	var domain, typ string
	for i := range op {
		if op[i] == ':' {
			domain, typ = op[:i], op[i+1:]
			break
		}
	}
	b := newModel(int64(6 + r.next()%18))
	var ins []string
	for i := range int(r.next() % 6) {
		name := fmt.Sprintf("in%d", i)
		switch r.next() % 5 {
		case 0, 1: // a float input of fuzzed shape
			dims := make([]int64, r.next()%6)
			for j := range dims {
				dims[j] = int64(r.next() % 7)
			}
			b.input(name, f32, dims...)
		case 2: // a rank-1 int64 constant
			vals := make([]int64, r.next()%6)
			for j := range vals {
				vals[j] = r.small()
			}
			b.ints(name, []int64{int64(len(vals))}, vals...)
		case 3: // an int64 scalar constant
			b.ints(name, nil, r.small())
		default: // an omitted optional input
			name = ""
		}
		ins = append(ins, name)
	}
	var attrs []*onnxpb.AttributeProto
	for range int(r.next() % 5) {
		attrs = append(attrs, fuzzAttr(r, fuzzAttrNames[int(r.next())%len(fuzzAttrNames)]))
	}
	var outs []string
	for i := range 1 + int(r.next()%3) {
		outs = append(outs, fmt.Sprintf("out%d", i))
	}
	if domain == "" {
		b.node(typ, ins, outs, attrs...)
	} else {
		b.domainNode(domain, typ, ins, outs, attrs...)
	}
	for _, o := range outs {
		b.output(o)
	}
	return b.m
}
