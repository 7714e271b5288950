package tf

import (
	"fmt"
	"strings"
	"testing"

	"github.com/opplace/opplace/graph"
	"github.com/opplace/opplace/internal/importopt"
)

// Text-GraphDef builders for small test graphs.

func dimsText(dims []int64) string {
	var b strings.Builder
	for _, d := range dims {
		fmt.Fprintf(&b, "dim { size: %d } ", d)
	}
	return b.String()
}

func ph(name string, dims ...int64) string {
	return fmt.Sprintf(`node { name: %q op: "Placeholder" attr { key: "dtype" value { type: DT_FLOAT } } attr { key: "shape" value { shape { %s } } } }
`, name, dimsText(dims))
}

// ci is an int32 Const; a nil vals leaves its contents unknown.
func ci(name string, dims []int64, vals ...int64) string {
	var v strings.Builder
	for _, x := range vals {
		fmt.Fprintf(&v, "int_val: %d ", x)
	}
	return fmt.Sprintf(`node { name: %q op: "Const" attr { key: "dtype" value { type: DT_INT32 } } attr { key: "value" value { tensor { dtype: DT_INT32 tensor_shape { %s } %s } } } }
`, name, dimsText(dims), v.String())
}

// cf is a float weight Const.
func cf(name string, dims ...int64) string {
	return fmt.Sprintf(`node { name: %q op: "Const" attr { key: "dtype" value { type: DT_FLOAT } } attr { key: "value" value { tensor { dtype: DT_FLOAT tensor_shape { %s } } } } }
`, name, dimsText(dims))
}

func nd(name, op string, inputs []string, attrs ...string) string {
	var b strings.Builder
	fmt.Fprintf(&b, "node { name: %q op: %q ", name, op)
	for _, in := range inputs {
		fmt.Fprintf(&b, "input: %q ", in)
	}
	for _, a := range attrs {
		b.WriteString(a + " ")
	}
	return b.String() + "}\n"
}

func aI(k string, v int64) string { return fmt.Sprintf("attr { key: %q value { i: %d } }", k, v) }
func aB(k string) string          { return fmt.Sprintf("attr { key: %q value { b: true } }", k) }
func aS(k, v string) string       { return fmt.Sprintf("attr { key: %q value { s: %q } }", k, v) }
func aT(k, v string) string       { return fmt.Sprintf("attr { key: %q value { type: %s } }", k, v) }
func aIs(k string, v ...int64) string {
	var b strings.Builder
	for _, x := range v {
		fmt.Fprintf(&b, "i: %d ", x)
	}
	return fmt.Sprintf("attr { key: %q value { list { %s } } }", k, b.String())
}
func aSs(k string, v ...string) string {
	var b strings.Builder
	for _, x := range v {
		fmt.Fprintf(&b, "s: %q ", x)
	}
	return fmt.Sprintf("attr { key: %q value { list { %s } } }", k, b.String())
}

func in(names ...string) []string { return names }

func d(v ...int64) []int64 { return v }

type graphOp = graph.Op

func TestShapes(t *testing.T) {
	x := ph("x", 2, 32, 32, 3)
	for _, tc := range []struct {
		name  string
		graph string
		out   string
		shape string
		macs  int64 // -1: not checked
		flops int64 // -1: not checked
	}{
		{"conv NHWC SAME stride 2", x + cf("w", 3, 3, 3, 16) + nd("y", "Conv2D", in("x", "w"), aIs("strides", 1, 2, 2, 1), aS("padding", "SAME")),
			"y", "2x16x16x16", 2 * 16 * 16 * 16 * 27, -1},
		{"conv NCHW VALID dilated", ph("x", 1, 8, 20, 20) + cf("w", 3, 3, 8, 4) + nd("y", "Conv2D", in("x", "w"),
			aIs("strides", 1, 1, 1, 1), aIs("dilations", 1, 1, 2, 2), aS("padding", "VALID"), aS("data_format", "NCHW")),
			"y", "1x4x16x16", 16 * 16 * 4 * 9 * 8, -1},
		{"conv EXPLICIT padding", x + cf("w", 3, 3, 3, 8) + nd("y", "Conv2D", in("x", "w"), aIs("strides", 1, 1, 1, 1),
			aS("padding", "EXPLICIT"), aIs("explicit_paddings", 0, 0, 2, 2, 0, 0, 0, 0)), "y", "2x34x30x8", -1, -1}, // 32+2+2-3+1, 32-3+1
		{"fused conv bias relu6", x + cf("w", 1, 1, 3, 8) + cf("b", 8) + nd("y", "_FusedConv2D", in("x", "w", "b"),
			aIs("strides", 1, 1, 1, 1), aS("padding", "VALID"), aSs("fused_ops", "BiasAdd", "Relu6")),
			"y", "2x32x32x8", 2 * 32 * 32 * 8 * 3, 2*2*32*32*8*3 + 2*2*32*32*8},
		{"depthwise multiplier 2", x + cf("w", 3, 3, 3, 2) + nd("y", "DepthwiseConv2dNative", in("x", "w"), aIs("strides", 1, 1, 1, 1), aS("padding", "SAME")),
			"y", "2x32x32x6", 2 * 32 * 32 * 6 * 9, -1},
		{"fused depthwise", x + cf("w", 3, 3, 3, 1) + cf("b", 3) + nd("y", "FusedDepthwiseConv2dNative", in("x", "w", "b"),
			aIs("strides", 1, 2, 2, 1), aS("padding", "VALID"), aSs("fused_ops", "BiasAdd", "Relu")), "y", "2x15x15x3", 2 * 15 * 15 * 3 * 9, -1},
		{"batchnorm v3", x + cf("s", 3) + cf("o", 3) + cf("m", 3) + cf("v", 3) + nd("y", "FusedBatchNormV3", in("x", "s", "o", "m", "v")),
			"y", "2x32x32x3", 0, 4 * 2 * 32 * 32 * 3},
		{"batchnorm v3 mean output", x + cf("s", 3) + cf("o", 3) + cf("m", 3) + cf("v", 3) + nd("y", "FusedBatchNormV3", in("x", "s", "o", "m", "v")) +
			nd("z", "Identity", in("y:1")), "z", "3", -1, -1},
		{"maxpool", x + nd("y", "MaxPool", in("x"), aIs("ksize", 1, 3, 3, 1), aIs("strides", 1, 2, 2, 1), aS("padding", "VALID")),
			"y", "2x15x15x3", 0, 9 * 2 * 15 * 15 * 3},
		{"avgpool NCHW", ph("x", 1, 4, 10, 10) + nd("y", "AvgPool", in("x"), aIs("ksize", 1, 1, 2, 2), aIs("strides", 1, 1, 2, 2),
			aS("padding", "SAME"), aS("data_format", "NCHW")), "y", "1x4x5x5", -1, -1},
		{"matmul transposed", ph("a", 5, 7) + cf("b", 9, 7) + nd("y", "MatMul", in("a", "b"), aB("transpose_b")), "y", "5x9", 5 * 9 * 7, -1},
		{"fused matmul", ph("a", 5, 7) + cf("b", 7, 9) + cf("c", 9) + nd("y", "_FusedMatMul", in("a", "b", "c"), aSs("fused_ops", "BiasAdd")),
			"y", "5x9", 5 * 9 * 7, 2*5*9*7 + 5*9},
		{"batchmatmul broadcast", ph("a", 4, 1, 5, 7) + ph("b", 3, 7, 2) + nd("y", "BatchMatMulV2", in("a", "b")), "y", "4x3x5x2", 4 * 3 * 5 * 2 * 7, -1},
		{"batchmatmul adj_x", ph("a", 3, 7, 5) + ph("b", 3, 7, 2) + nd("y", "BatchMatMulV2", in("a", "b"), aB("adj_x")), "y", "3x5x2", 3 * 5 * 2 * 7, -1},
		{"biasadd", x + cf("b", 3) + nd("y", "BiasAdd", in("x", "b")), "y", "2x32x32x3", 0, 2 * 32 * 32 * 3},
		{"add broadcast", x + cf("c", 32, 1, 3) + nd("y", "AddV2", in("x", "c")), "y", "2x32x32x3", 0, 2 * 32 * 32 * 3},
		{"maximum broadcast scalar", x + cf("c") + nd("y", "Maximum", in("x", "c")), "y", "2x32x32x3", -1, -1},
		{"prelu", x + cf("a", 3) + nd("y", "Prelu", in("x", "a")), "y", "2x32x32x3", -1, -1},
		{"sigmoid", x + nd("y", "Sigmoid", in("x")), "y", "2x32x32x3", 0, 4 * 2 * 32 * 32 * 3},
		{"softmax", ph("a", 4, 10) + nd("y", "Softmax", in("a")), "y", "4x10", 0, 5 * 40},
		{"pad", x + ci("p", d(4, 2), 0, 0, 1, 1, 2, 2, 0, 5) + nd("y", "Pad", in("x", "p")), "y", "2x34x36x8", 0, 0},
		{"mirrorpad", x + ci("p", d(4, 2), 0, 0, 1, 1, 1, 1, 0, 0) + nd("y", "MirrorPad", in("x", "p"), aS("mode", "REFLECT")), "y", "2x34x34x3", -1, -1},
		{"concat", x + ph("z", 2, 32, 32, 5) + ci("ax", nil, -1) + nd("y", "ConcatV2", in("x", "z", "ax")), "y", "2x32x32x8", -1, -1},
		{"reshape -1", x + ci("s", d(2), 2, -1) + nd("y", "Reshape", in("x", "s")), "y", "2x3072", -1, -1},
		{"reshape from shape chain", x + nd("sh", "Shape", in("x")) + ci("b", d(1), 0) + ci("e", d(1), 1) + ci("st", d(1), 1) +
			nd("n", "StridedSlice", in("sh", "b", "e", "st"), aI("shrink_axis_mask", 1)) + ci("m1", nil, -1) +
			nd("tgt", "Pack", in("n", "m1")) + nd("y", "Reshape", in("x", "tgt")), "y", "2x3072", -1, -1},
		{"transpose", x + ci("p", d(4), 0, 3, 1, 2) + nd("y", "Transpose", in("x", "p")), "y", "2x3x32x32", -1, -1},
		{"mean keep_dims", x + ci("a", d(2), 1, 2) + nd("y", "Mean", in("x", "a"), aB("keep_dims")), "y", "2x1x1x3", 0, 2 * 32 * 32 * 3},
		{"sum all axes", x + ci("a", d(4), 0, 1, 2, 3) + nd("y", "Sum", in("x", "a")), "y", "scalar", -1, -1},
		{"max negative axis", x + ci("a", nil, -1) + nd("y", "Max", in("x", "a")), "y", "2x32x32", -1, -1},
		{"resize bilinear", x + ci("s", d(2), 64, 48) + nd("y", "ResizeBilinear", in("x", "s")), "y", "2x64x48x3", 0, 8 * 2 * 64 * 48 * 3},
		{"resize nearest", x + ci("s", d(2), 16, 16) + nd("y", "ResizeNearestNeighbor", in("x", "s")), "y", "2x16x16x3", -1, -1},
		{"squeeze", ph("a", 1, 5, 1, 2) + nd("y", "Squeeze", in("a"), aIs("squeeze_dims", 0)), "y", "5x1x2", -1, -1},
		{"squeeze all", ph("a", 1, 5, 1, 2) + nd("y", "Squeeze", in("a")), "y", "5x2", -1, -1},
		{"expanddims", ph("a", 5, 2) + ci("ax", nil, -1) + nd("y", "ExpandDims", in("a", "ax")), "y", "5x2x1", -1, -1},
		{"shape", x + nd("y", "Shape", in("x")), "y", "4", -1, -1},
		{"pack axis 1", ph("a", 5, 2) + ph("b", 5, 2) + nd("y", "Pack", in("a", "b"), aI("axis", 1)), "y", "5x2x2", -1, -1},
		{"unpack", ph("a", 5, 3) + nd("y", "Unpack", in("a"), aI("num", 3), aI("axis", 1)) + nd("z", "Identity", in("y:2")), "z", "5", -1, -1},
		{"split", x + ci("ax", nil, 1) + nd("y", "Split", in("ax", "x"), aI("num_split", 4)) + nd("z", "Identity", in("y:3")), "z", "2x8x32x3", -1, -1},
		{"splitv", x + ci("sz", d(3), 10, -1, 2) + ci("ax", nil, 2) + nd("y", "SplitV", in("x", "sz", "ax"), aI("num_split", 3)) +
			nd("z", "Identity", in("y:1")), "z", "2x32x20x3", -1, -1},
		{"gatherv2", ph("p", 100, 16) + ci("i", d(4, 7)) + ci("ax", nil, 0) + nd("y", "GatherV2", in("p", "i", "ax")), "y", "4x7x16", -1, -1},
		{"gather batch_dims", ph("p", 4, 10, 16) + ci("i", d(4, 3)) + ci("ax", nil, 1) + nd("y", "GatherV2", in("p", "i", "ax"), aI("batch_dims", 1)), "y", "4x3x16", -1, -1},
		{"cast", x + nd("y", "Cast", in("x"), aT("DstT", "DT_HALF")), "y", "2x32x32x3", -1, -1},
		{"topk", ph("a", 4, 100) + ci("k", nil, 5) + nd("y", "TopKV2", in("a", "k")) + nd("z", "Identity", in("y:1")), "z", "4x5", -1, -1},
		{"argmax", ph("a", 4, 100) + ci("ax", nil, 1) + nd("y", "ArgMax", in("a", "ax")), "y", "4", -1, -1},
		{"strided slice begin/end masks", x + ci("b", d(4), 0, 1, 0, 0) + ci("e", d(4), 0, -1, 0, 0) + ci("s", d(4), 1, 2, 1, 1) +
			nd("y", "StridedSlice", in("x", "b", "e", "s"), aI("begin_mask", 13), aI("end_mask", 13)), "y", "2x15x32x3", -1, -1}, // range(32)[1:-1:2]
		{"strided slice ellipsis new axis shrink", x + ci("b", d(3), 0, 0, 1) + ci("e", d(3), 0, 0, 2) + ci("s", d(3), 1, 1, 1) +
			nd("y", "StridedSlice", in("x", "b", "e", "s"), aI("ellipsis_mask", 1), aI("new_axis_mask", 2), aI("shrink_axis_mask", 4)), "y", "2x32x32x1", -1, -1},
		{"strided slice negative stride", ph("a", 10, 4) + ci("b", d(1), -1) + ci("e", d(1), 0) + ci("s", d(1), -3) +
			nd("y", "StridedSlice", in("a", "b", "e", "s"), aI("end_mask", 1)), "y", "4x4", -1, -1},
		{"fill from shape", x + nd("sh", "Shape", in("x")) + cf("v") + nd("y", "Fill", in("sh", "v")), "y", "2x32x32x3", -1, -1},
		{"tile", ph("a", 2, 3) + ci("m", d(2), 4, 1) + nd("y", "Tile", in("a", "m")), "y", "8x3", -1, -1},
		{"depth to space", ph("a", 1, 4, 4, 16) + nd("y", "DepthToSpace", in("a"), aI("block_size", 2)), "y", "1x8x8x4", -1, -1},
		{"conv2d backprop input", ci("sz", d(4), 1, 16, 16, 8) + cf("w", 3, 3, 8, 4) + ph("dy", 1, 8, 8, 4) +
			nd("y", "Conv2DBackpropInput", in("sz", "w", "dy"), aIs("strides", 1, 2, 2, 1), aS("padding", "SAME")), "y", "1x16x16x8", 8 * 8 * 4 * 9 * 8, -1},
		{"select v2", ph("a", 4, 1) + ph("b", 1, 5) + ph("c", 4, 5) + nd("y", "SelectV2", in("a", "b", "c")), "y", "4x5", -1, -1},
		{"addn", x + x[:0] + ph("z", 2, 32, 32, 3) + nd("y", "AddN", in("x", "z", "x")), "y", "2x32x32x3", 0, 2 * 2 * 32 * 32 * 3},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, err := Decode([]byte(tc.graph), "t.pbtxt", Options{})
			if err != nil {
				t.Fatal(err)
			}
			id, ok := m.Graph.OpByName(tc.out)
			if !ok {
				t.Fatalf("no op %s", tc.out)
			}
			op := m.Graph.Op(id)
			if got := m.Graph.Tensor(op.Outputs[0]).ShapeString(); got != tc.shape {
				t.Errorf("shape %s, want %s", got, tc.shape)
			}
			if tc.macs >= 0 && op.Work.MACs != tc.macs {
				t.Errorf("MACs %d, want %d", op.Work.MACs, tc.macs)
			}
			if tc.flops >= 0 && op.Work.FLOPs != tc.flops {
				t.Errorf("FLOPs %d, want %d", op.Work.FLOPs, tc.flops)
			}
			if op.Work.Estimated {
				t.Errorf("work is estimated")
			}
		})
	}
}

// Placeholder shapes follow the ONNX options: Batch binds a dynamic
// leading dimension, Shapes sets the whole shape, and an unbound one is
// an error naming the options (tf.Options.Import's fields by default).
func TestPlaceholderOptions(t *testing.T) {
	g := `node { name: "in" op: "Placeholder" attr { key: "dtype" value { type: DT_FLOAT } } attr { key: "shape" value { shape { dim { size: -1 } dim { size: 8 } } } } }
` + nd("y", "Relu", in("in"))
	for _, tc := range []struct {
		opts  importopt.Options
		shape string
		err   string
	}{
		{importopt.Options{}, "", `input "in" axis 0 has no fixed size (-1); set the whole shape with Options.Import.Shapes["in"] = []int64{D0,D1,...} or Options.Import.Batch = N`},
		{importopt.Options{Batch: 16}, "16x8", ""},
		{importopt.Options{Batch: 16, Shapes: map[string][]int64{"in": {3, 8}}}, "3x8", ""},
	} {
		m, err := Decode([]byte(g), "t.pbtxt", Options{Import: tc.opts})
		if tc.err != "" {
			if err == nil || !strings.Contains(err.Error(), tc.err) {
				t.Errorf("%+v: error %v, want %q", tc.opts, err, tc.err)
			}
			continue
		}
		if err != nil {
			t.Fatal(err)
		}
		id, _ := m.Graph.OpByName("y")
		if got := m.Graph.Tensor(m.Graph.Op(id).Outputs[0]).ShapeString(); got != tc.shape {
			t.Errorf("%+v: shape %s, want %s", tc.opts, got, tc.shape)
		}
	}
}

// Unknown ops keep going with a warning and an estimated cost.
func TestUnknownOp(t *testing.T) {
	m, err := Decode([]byte(ph("x", 4, 4)+nd("y", "MyCustomOp", in("x"))+nd("z", "Relu", in("y"))), "t.pbtxt", Options{})
	if err != nil {
		t.Fatal(err)
	}
	id, _ := m.Graph.OpByName("y")
	if w := m.Graph.Op(id).Work; !w.Estimated || w.FLOPs != 4*16 {
		t.Errorf("work %+v, want an estimate of 4 FLOPs per element read", w)
	}
	if !strings.Contains(strings.Join(m.Warnings, "\n"), "unknown TensorFlow op MyCustomOp") {
		t.Errorf("warnings %q", m.Warnings)
	}
}

// Colocation, control inputs and device fields.
func TestTFSemantics(t *testing.T) {
	g := ph("x", 4, 4) + cf("w", 4, 4) +
		`node { name: "a" op: "MatMul" input: "x" input: "w" device: "/job:worker/replica:0/task:0/device:GPU:1" }
node { name: "b" op: "Relu" input: "a" input: "^c" attr { key: "_class" value { list { s: "loc:@a" } } } }
node { name: "c" op: "Relu" input: "x" }
node { name: "d" op: "Identity" input: "b" attr { key: "_class" value { list { s: "loc:@b" } } } }
`
	m, err := Decode([]byte(g), "t.pbtxt", Options{})
	if err != nil {
		t.Fatal(err)
	}
	op := func(n string) *graphOp { id, _ := m.Graph.OpByName(n); return m.Graph.Op(id) }
	if op("a").Colocate == "" || op("a").Colocate != op("b").Colocate || op("b").Colocate != op("d").Colocate || op("c").Colocate != "" {
		t.Errorf("colocation groups: a %q b %q c %q d %q", op("a").Colocate, op("b").Colocate, op("c").Colocate, op("d").Colocate)
	}
	cid, _ := m.Graph.OpByName("c")
	if deps := op("b").ControlDeps; len(deps) != 1 || deps[0] != cid {
		t.Errorf("b's control deps %v, want [%d]", deps, cid)
	}
	if len(op("b").Inputs) != 1 {
		t.Errorf("a control input became data: %v", op("b").Inputs)
	}
	if op("a").Device != "" || op("a").Attrs.String("_device", "") != "/job:worker/replica:0/task:0/device:GPU:1" {
		t.Errorf("without pins: device %q, attr %q", op("a").Device, op("a").Attrs.String("_device", ""))
	}
	pins := func(s string) (string, error) { return "pinned:" + s, nil }
	m, err = Decode([]byte(g), "t.pbtxt", Options{Pins: pins})
	if err != nil {
		t.Fatal(err)
	}
	if got := op("a").Device; got != "pinned:/job:worker/replica:0/task:0/device:GPU:1" {
		t.Errorf("pinned device %q", got)
	}
}
