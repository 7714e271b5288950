package onnx

import (
	"slices"
	"testing"

	"github.com/opplace/opplace/onnx/onnxpb"
	"google.golang.org/protobuf/proto"
)

type shapeCase struct {
	name  string
	model *modelBuilder
	opts  Options
	// want maps tensor names to expected shapes; macs is the total.
	want map[string][]int64
	macs int64
}

func shapeCases() []shapeCase {
	return []shapeCase{
		{name: "conv pads strides", macs: 1 * 8 * 16 * 16 * 3 * 9,
			model: newModel(17).input("x", f32, 1, 3, 32, 32).weight("w", 8, 3, 3, 3).weight("b", 8).
				node("Conv", strs("x", "w", "b"), strs("y"), aInts("pads", 1, 1, 1, 1), aInts("strides", 2, 2)).output("y"),
			want: map[string][]int64{"y": {1, 8, 16, 16}}},
		{name: "conv dilations groups", macs: 2 * 8 * 28 * 28 * 2 * 9,
			model: newModel(17).input("x", f32, 2, 8, 32, 32).weight("w", 8, 2, 3, 3).
				node("Conv", strs("x", "w"), strs("y"), aInts("dilations", 2, 2), aInt("group", 4)).output("y"),
			want: map[string][]int64{"y": {2, 8, 28, 28}}},
		{name: "conv depthwise same upper", macs: 1 * 16 * 8 * 8 * 1 * 9,
			model: newModel(17).input("x", f32, 1, 16, 15, 15).weight("w", 16, 1, 3, 3).
				node("Conv", strs("x", "w"), strs("y"), aStr("auto_pad", "SAME_UPPER"), aInts("strides", 2, 2), aInt("group", 16)).output("y"),
			want: map[string][]int64{"y": {1, 16, 8, 8}}},
		{name: "conv1d valid", macs: 4 * 6 * 8 * 5 * 3,
			model: newModel(11).input("x", f32, 4, 5, 10).weight("w", 6, 5, 3).
				node("Conv", strs("x", "w"), strs("y"), aStr("auto_pad", "VALID")).output("y"),
			want: map[string][]int64{"y": {4, 6, 8}}},
		{name: "conv transpose", macs: 1 * 4 * 5 * 5 * 2 * 9,
			model: newModel(17).input("x", f32, 1, 4, 5, 5).weight("w", 4, 2, 3, 3).
				node("ConvTranspose", strs("x", "w"), strs("y"), aInts("strides", 2, 2), aInts("pads", 1, 1, 1, 1), aInts("output_padding", 1, 1)).output("y"),
			want: map[string][]int64{"y": {1, 2, 10, 10}}},
		{name: "maxpool ceil mode",
			model: newModel(17).input("x", f32, 1, 3, 112, 112).
				node("MaxPool", strs("x"), strs("y"), aInts("kernel_shape", 3, 3), aInts("strides", 2, 2), aInt("ceil_mode", 1)).
				node("MaxPool", strs("x"), strs("z"), aInts("kernel_shape", 3, 3), aInts("strides", 2, 2)).output("y").output("z"),
			want: map[string][]int64{"y": {1, 3, 56, 56}, "z": {1, 3, 55, 55}}},
		{name: "avgpool pads and global",
			model: newModel(17).input("x", f32, 2, 3, 7, 7).
				node("AveragePool", strs("x"), strs("y"), aInts("kernel_shape", 3, 3), aInts("pads", 1, 1, 1, 1)).
				node("GlobalAveragePool", strs("y"), strs("z")).output("z"),
			want: map[string][]int64{"y": {2, 3, 7, 7}, "z": {2, 3, 1, 1}}},
		{name: "gemm transA transB", macs: 5 * 7 * 3,
			model: newModel(17).input("a", f32, 3, 5).weight("b", 7, 3).weight("c", 7).
				node("Gemm", strs("a", "b", "c"), strs("y"), aInt("transA", 1), aInt("transB", 1)).output("y"),
			want: map[string][]int64{"y": {5, 7}}},
		{name: "matmul 1-D and 3-D and 4-D broadcasting", macs: 4 + 2*3*4*5 + 6*7*3*4*5 + 2*3*4,
			model: newModel(17).input("v", f32, 4).input("a", f32, 2, 3, 4).input("b", f32, 4, 5).
				input("c", f32, 6, 1, 3, 4).input("d", f32, 7, 4, 5).
				node("MatMul", strs("v", "v"), strs("dot")).
				node("MatMul", strs("a", "b"), strs("ab")).
				node("MatMul", strs("c", "d"), strs("cd")).
				node("MatMul", strs("a", "v"), strs("av")).output("dot").output("ab").output("cd").output("av"),
			want: map[string][]int64{"dot": {}, "ab": {2, 3, 5}, "cd": {6, 7, 3, 5}, "av": {2, 3}}},
		{name: "reshape 0 and -1",
			model: newModel(17).input("x", f32, 2, 3, 4).ints("s", []int64{3}, 0, -1, 2).
				node("Reshape", strs("x", "s"), strs("y")).output("y"),
			want: map[string][]int64{"y": {2, 6, 2}}},
		{name: "shape gather concat reshape folding",
			model: newModel(17).input("x", f32, 8, 128, 768).
				node("Shape", strs("x"), strs("s")).
				node("Constant", nil, strs("i0"), aTensor("value", intTensor("", nil, 0))).
				node("Constant", nil, strs("i1"), aTensor("value", intTensor("", nil, 1))).
				node("Gather", strs("s", "i0"), strs("b"), aInt("axis", 0)).
				node("Gather", strs("s", "i1"), strs("t"), aInt("axis", 0)).
				node("Constant", nil, strs("ax"), aTensor("value", intTensor("", []int64{1}, 0))).
				node("Unsqueeze", strs("b", "ax"), strs("bu")).
				node("Unsqueeze", strs("t", "ax"), strs("tu")).
				node("Constant", nil, strs("h"), aTensor("value", intTensor("", []int64{2}, 12, 64))).
				node("Concat", strs("bu", "tu", "h"), strs("target"), aInt("axis", 0)).
				node("Reshape", strs("x", "target"), strs("y")).
				node("Transpose", strs("y"), strs("yt"), aInts("perm", 0, 2, 1, 3)).output("yt"),
			want: map[string][]int64{"target": {4}, "y": {8, 128, 12, 64}, "yt": {8, 12, 128, 64}}},
		{name: "squeeze unsqueeze opset 11 attributes",
			model: newModel(11).input("x", f32, 1, 3, 1, 5).
				node("Squeeze", strs("x"), strs("s"), aInts("axes", 0, -2)).
				node("Unsqueeze", strs("s"), strs("u"), aInts("axes", 0, 3)).
				node("Squeeze", strs("x"), strs("all")).output("u").output("all"),
			want: map[string][]int64{"s": {3, 5}, "u": {1, 3, 5, 1}, "all": {3, 5}}},
		{name: "squeeze unsqueeze opset 13 inputs",
			model: newModel(13).input("x", f32, 1, 3, 1, 5).ints("a", []int64{2}, 0, 2).ints("b", []int64{1}, -1).
				node("Squeeze", strs("x", "a"), strs("s")).
				node("Unsqueeze", strs("s", "b"), strs("u")).output("u"),
			want: map[string][]int64{"s": {3, 5}, "u": {3, 5, 1}}},
		{name: "slice negative and large ends",
			model: newModel(17).input("x", f32, 10, 20, 30).
				ints("st", []int64{3}, 1, -5, 0).ints("en", []int64{3}, 1<<62, -1, 30).ints("ax", []int64{3}, 0, 1, 2).ints("sp", []int64{3}, 1, 1, 3).
				node("Slice", strs("x", "st", "en", "ax", "sp"), strs("y")).
				ints("rs", []int64{1}, -1).ints("re", []int64{1}, -1<<62).ints("ra", []int64{1}, 0).ints("rp", []int64{1}, -2).
				node("Slice", strs("x", "rs", "re", "ra", "rp"), strs("rev")).output("y").output("rev"),
			want: map[string][]int64{"y": {9, 4, 10}, "rev": {5, 20, 30}}},
		{name: "slice opset 9 attributes",
			model: newModel(9).input("x", f32, 10, 20).
				node("Slice", strs("x"), strs("y"), aInts("starts", 2), aInts("ends", 100), aInts("axes", 1)).output("y"),
			want: map[string][]int64{"y": {10, 18}}},
		{name: "split forms",
			model: newModel(17).input("x", f32, 4, 12).ints("sp", []int64{3}, 2, 4, 6).
				node("Split", strs("x", "sp"), strs("a", "b", "c"), aInt("axis", 1)).
				node("Split", strs("x"), strs("d", "e")).output("a").output("b").output("c").output("d").output("e"),
			want: map[string][]int64{"a": {4, 2}, "b": {4, 4}, "c": {4, 6}, "d": {2, 12}, "e": {2, 12}}},
		{name: "split opset 11 attribute and opset 18 num_outputs",
			model: newModel(11).input("x", f32, 6).node("Split", strs("x"), strs("a", "b"), aInts("split", 1, 5)).output("a").output("b"),
			want:  map[string][]int64{"a": {1}, "b": {5}}},
		{name: "split uneven opset 18",
			model: newModel(18).input("x", f32, 7).node("Split", strs("x"), strs("a", "b", "c"), aInt("num_outputs", 3)).output("c"),
			want:  map[string][]int64{"a": {3}, "b": {3}, "c": {1}}},
		{name: "concat transpose default perm",
			model: newModel(17).input("x", f32, 2, 3).input("y", f32, 2, 5).
				node("Concat", strs("x", "y"), strs("c"), aInt("axis", -1)).
				node("Transpose", strs("c"), strs("t")).output("t"),
			want: map[string][]int64{"c": {2, 8}, "t": {8, 2}}},
		{name: "resize scales and sizes",
			model: newModel(13).input("x", f32, 1, 3, 10, 10).
				node("Constant", nil, strs("sc"), aTensor("value", floatTensor("", []int64{4}, 1, 1, 2, 1.5))).
				node("Resize", strs("x", "", "sc"), strs("a")).
				ints("sz", []int64{4}, 1, 3, 7, 9).
				node("Resize", strs("x", "", "", "sz"), strs("b")).output("a").output("b"),
			want: map[string][]int64{"a": {1, 3, 20, 15}, "b": {1, 3, 7, 9}}},
		{name: "pad input and attribute forms",
			model: newModel(17).input("x", f32, 1, 3, 4, 4).ints("p", []int64{8}, 0, 0, 1, 2, 0, 0, 3, 4).
				node("Pad", strs("x", "p"), strs("y")).output("y"),
			want: map[string][]int64{"y": {1, 3, 8, 10}}},
		{name: "pad opset 2",
			model: newModel(2).input("x", f32, 4, 4).node("Pad", strs("x"), strs("y"), aInts("pads", 1, 0, 1, 2)).output("y"),
			want:  map[string][]int64{"y": {6, 6}}},
		{name: "reduce mean keepdims",
			model: newModel(17).input("x", f32, 2, 3, 4).
				node("ReduceMean", strs("x"), strs("k"), aInts("axes", 1)).
				node("ReduceMean", strs("x"), strs("n"), aInts("axes", -1, 0), aInt("keepdims", 0)).output("k").output("n"),
			want: map[string][]int64{"k": {2, 1, 4}, "n": {3}}},
		{name: "reduce sum axes input opset 13",
			model: newModel(13).input("x", f32, 2, 3, 4).ints("a", []int64{1}, 2).
				node("ReduceSum", strs("x", "a"), strs("y"), aInt("keepdims", 0)).output("y"),
			want: map[string][]int64{"y": {2, 3}}},
		{name: "expand constantofshape range",
			model: newModel(17).input("x", f32, 3, 1).ints("s", []int64{3}, 2, 1, 4).
				node("Expand", strs("x", "s"), strs("e")).
				node("ConstantOfShape", strs("s"), strs("z")).
				ints("r0", nil, 0).ints("r1", nil, 10).ints("r2", nil, 3).
				node("Range", strs("r0", "r1", "r2"), strs("r")).output("e").output("z").output("r"),
			want: map[string][]int64{"e": {2, 3, 4}, "z": {2, 1, 4}, "r": {4}}},
		{name: "clip opset 11 inputs and flatten",
			model: newModel(13).input("x", f32, 2, 3, 4).weight("lo").weight("hi").
				node("Clip", strs("x", "lo", "hi"), strs("c")).
				node("Flatten", strs("c"), strs("f"), aInt("axis", 2)).output("f"),
			want: map[string][]int64{"c": {2, 3, 4}, "f": {6, 4}}},
		{name: "lstm bidirectional", macs: 5 * 2 * 3 * 4 * 8 * (10 + 8),
			model: newModel(14).input("x", f32, 5, 3, 10).weight("w", 2, 32, 10).weight("r", 2, 32, 8).
				node("LSTM", strs("x", "w", "r"), strs("y", "yh", "yc"), aInt("hidden_size", 8), aStr("direction", "bidirectional")).output("y"),
			want: map[string][]int64{"y": {5, 2, 3, 8}, "yh": {2, 3, 8}, "yc": {2, 3, 8}}},
		{name: "gather and softmax and layernorm",
			model: newModel(17).input("ids", i64, 4, 16).weight("emb", 1000, 64).weight("g", 64).
				node("Gather", strs("emb", "ids"), strs("e")).
				node("LayerNormalization", strs("e", "g"), strs("ln")).
				node("Softmax", strs("ln"), strs("sm")).output("sm"),
			want: map[string][]int64{"e": {4, 16, 64}, "sm": {4, 16, 64}}},
		{name: "where equal cast",
			model: newModel(17).input("x", f32, 4, 1).input("y", f32, 1, 5).
				node("Equal", strs("x", "y"), strs("eq")).
				node("Where", strs("eq", "x", "y"), strs("w")).
				node("Cast", strs("eq"), strs("c"), aInt("to", 7)).output("w").output("c"),
			want: map[string][]int64{"eq": {4, 5}, "w": {4, 5}, "c": {4, 5}}},
		{name: "symbolic dims bound by Dims and Batch",
			model: newModel(17).symInput("x", f32, "n", "seq", 8).
				node("Relu", strs("x"), strs("y")).output("y"),
			opts: Options{Dims: map[string]int64{"seq": 7}, Batch: 3},
			want: map[string][]int64{"y": {3, 7, 8}}},
		{name: "Shapes overrides an input",
			model: newModel(17).symInput("x", f32, "n", 4).node("Relu", strs("x"), strs("y")).output("y"),
			opts:  Options{Shapes: map[string][]int64{"x": {2, 9}}},
			want:  map[string][]int64{"y": {2, 9}}},
		{name: "einsum", macs: 2 * 3 * 4 * 5,
			model: newModel(17).input("a", f32, 2, 3, 4).input("b", f32, 2, 4, 5).
				node("Einsum", strs("a", "b"), strs("y"), aStr("equation", "bij,bjk->bik")).output("y"),
			want: map[string][]int64{"y": {2, 3, 5}}},
	}
}

func TestShapes(t *testing.T) {
	for _, tc := range shapeCases() {
		t.Run(tc.name, func(t *testing.T) {
			m, err := Decode(tc.model.bytes(t), tc.name+".onnx", tc.opts)
			if err != nil {
				t.Fatal(err)
			}
			g := m.Graph
			for name, want := range tc.want {
				id, ok := g.TensorByName(name)
				if !ok {
					t.Fatalf("no tensor %q", name)
				}
				tt := g.Tensor(id)
				if !tt.ShapeKnown || !slices.Equal(tt.Shape, want) {
					t.Errorf("%s: shape %s, want %v", name, tt.ShapeString(), want)
				}
			}
			_, macs, unshaped := totals(g)
			if len(unshaped) > 0 {
				t.Errorf("unshaped ops: %v", unshaped)
			}
			if macs != tc.macs {
				t.Errorf("MACs = %d, want %d", macs, tc.macs)
			}
			if len(m.Warnings) > 0 {
				t.Errorf("warnings: %v", m.Warnings)
			}
		})
	}
}

// TestConstantInts checks that a Constant node stays an op and exposes its
// integer value on the attribute.
func TestConstantInts(t *testing.T) {
	b := newModel(17).input("x", f32, 2, 6).
		node("Constant", nil, strs("s"), aTensor("value", intTensor("", []int64{2}, 3, 4))).
		node("Reshape", strs("x", "s"), strs("y")).output("y")
	m, err := Decode(b.bytes(t), "c.onnx", Options{})
	if err != nil {
		t.Fatal(err)
	}
	op := m.Graph.Ops[0]
	if op.Type != "Constant" || op.Name != "Constant_0" {
		t.Fatalf("op 0 = %s %q", op.Type, op.Name)
	}
	if got := op.Attrs["value"].TensorInts; !slices.Equal(got, []int64{3, 4}) {
		t.Errorf("TensorInts = %v", got)
	}
	if m.Graph.Ops[1].Name != "Reshape_1" {
		t.Errorf("generated name %q", m.Graph.Ops[1].Name)
	}
}

func TestUnknownOp(t *testing.T) {
	b := newModel(17).input("x", f32, 2, 3).
		domainNode("example.com", "Mystery", strs("x"), strs("a")).
		domainNode("example.com", "Mystery", strs("a"), strs("b")).
		node("Relu", strs("b"), strs("c")).output("c")
	// Declare a's shape: it is kept; b stays unknown and so does c.
	b.m.Graph.ValueInfo = append(b.m.Graph.ValueInfo, valueInfo("a", f32, 4, 5))
	m, err := Decode(b.bytes(t), "u.onnx", Options{})
	if err != nil {
		t.Fatal(err)
	}
	g := m.Graph
	a, _ := g.TensorByName("a")
	if s := g.Tensor(a).ShapeString(); s != "4x5" {
		t.Errorf("declared shape lost: %s", s)
	}
	c, _ := g.TensorByName("c")
	if g.Tensor(c).ShapeKnown {
		t.Errorf("c should be unknown")
	}
	for i := range g.Ops {
		if !g.Ops[i].Work.Estimated {
			t.Errorf("op %s: work not marked estimated", g.Ops[i].Name)
		}
	}
	want := []string{
		"1 Relu node(s) have outputs of unknown shape (first: \"Relu_2\")",
		"unknown operator Mystery (domain example.com): output shapes taken from the model where declared, cost estimated",
	}
	if !slices.Equal(m.Warnings, want) {
		t.Errorf("warnings = %q", m.Warnings)
	}
}

func TestContribOps(t *testing.T) {
	b := newModel(17).input("x", f32, 2, 8, 64).weight("w", 64, 192).weight("bias", 192).weight("g", 64).
		domainNode(msDomain, "Attention", strs("x", "w", "bias"), strs("att"), aInt("num_heads", 4)).
		domainNode(msDomain, "SkipLayerNormalization", strs("att", "x", "g"), strs("sln")).
		domainNode(msDomain, "FastGelu", strs("sln"), strs("fg")).
		domainNode(msDomain, "Gelu", strs("fg"), strs("gl")).
		domainNode(msDomain, "BiasGelu", strs("gl", "g"), strs("bg")).
		input("img", f32, 1, 3, 8, 8).weight("k", 4, 3, 3, 3).
		domainNode(msDomain, "FusedConv", strs("img", "k"), strs("fc"), aStr("activation", "Relu")).output("bg").output("fc")
	m, err := Decode(b.bytes(t), "ms.onnx", Options{})
	if err != nil {
		t.Fatal(err)
	}
	g := m.Graph
	for name, want := range map[string]string{"att": "2x8x64", "sln": "2x8x64", "bg": "2x8x64", "fc": "1x4x6x6"} {
		id, _ := g.TensorByName(name)
		if s := g.Tensor(id).ShapeString(); s != want {
			t.Errorf("%s = %s, want %s", name, s, want)
		}
	}
	_, macs, _ := totals(g)
	attn := int64(2*8*64*192) + 2*(2*4*8*8*16)
	conv := int64(4 * 6 * 6 * 27)
	if macs != attn+conv {
		t.Errorf("MACs = %d, want %d", macs, attn+conv)
	}
	if len(m.Warnings) != 0 {
		t.Errorf("warnings: %v", m.Warnings)
	}
}

// TestControlFlow imports If and Loop with bodies reading outer values.
func TestControlFlow(t *testing.T) {
	mm := func(out string) *onnxpb.GraphProto {
		return &onnxpb.GraphProto{Name: proto.String(out),
			Node:   []*onnxpb.NodeProto{{OpType: proto.String("MatMul"), Input: strs("x", "w"), Output: strs(out)}},
			Output: []*onnxpb.ValueInfoProto{{Name: proto.String(out)}}}
	}
	relu := &onnxpb.GraphProto{Name: proto.String("else"),
		Node:   []*onnxpb.NodeProto{{OpType: proto.String("Relu"), Input: strs("x"), Output: strs("r")}},
		Output: []*onnxpb.ValueInfoProto{{Name: proto.String("r")}}}
	body := &onnxpb.GraphProto{Name: proto.String("body"),
		Input: []*onnxpb.ValueInfoProto{valueInfo("i", i64), valueInfo("c", int32(onnxpb.TensorProto_BOOL)), valueInfo("acc", f32)},
		Node: []*onnxpb.NodeProto{
			{OpType: proto.String("Identity"), Input: strs("c"), Output: strs("c2")},
			{OpType: proto.String("MatMul"), Input: strs("acc", "w"), Output: strs("acc2")},
			{OpType: proto.String("Relu"), Input: strs("acc2"), Output: strs("scan")},
		},
		Output: []*onnxpb.ValueInfoProto{{Name: proto.String("c2")}, {Name: proto.String("acc2")}, {Name: proto.String("scan")}}}
	b := newModel(17).input("x", f32, 4, 8).weight("w", 8, 8).input("cond", int32(onnxpb.TensorProto_BOOL)).
		node("If", strs("cond"), strs("y"), aGraph("then_branch", mm("t")), aGraph("else_branch", relu)).
		ints("trip", nil, 5).node("Constant", nil, strs("true"), aTensor("value", &onnxpb.TensorProto{
		DataType: proto.Int32(int32(onnxpb.TensorProto_BOOL)), Int32Data: []int32{1}})).
		node("Loop", strs("trip", "true", "x"), strs("final", "stacked"), aGraph("body", body)).
		output("y").output("final").output("stacked")
	m, err := Decode(b.bytes(t), "cf.onnx", Options{})
	if err != nil {
		t.Fatal(err)
	}
	g := m.Graph
	for name, want := range map[string]string{"y": "4x8", "final": "4x8", "stacked": "5x4x8"} {
		id, _ := g.TensorByName(name)
		if s := g.Tensor(id).ShapeString(); s != want {
			t.Errorf("%s = %s, want %s", name, s, want)
		}
	}
	ifOp, loopOp := g.Ops[0], g.Ops[2]
	if w := ifOp.Work.MACs; w != 4*8*8 {
		t.Errorf("If MACs = %d, want the MatMul branch's %d", w, 4*8*8)
	}
	if w := loopOp.Work.MACs; w != 5*4*8*8 {
		t.Errorf("Loop MACs = %d, want %d", w, 5*4*8*8)
	}
	// The If reads x and w through its branches: they are implicit inputs.
	if len(ifOp.Inputs) != 3 {
		t.Errorf("If inputs = %v, want cond plus implicit x and w", ifOp.Inputs)
	}
	if gs := ifOp.Attrs["then_branch"].Graphs; len(gs) != 1 || len(gs[0].Ops) != 1 || !gs[0].Tensors[gs[0].Outputs[0]].ShapeKnown {
		t.Errorf("then branch not imported as a shaped nested graph")
	}
}
