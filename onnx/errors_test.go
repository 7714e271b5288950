package onnx

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/opplace/opplace/graph"
	"github.com/opplace/opplace/onnx/onnxpb"
	"google.golang.org/protobuf/proto"
)

func TestBadInput(t *testing.T) {
	dir := t.TempDir()
	write := func(name string, data []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, data, 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	real, err := os.ReadFile(modelPath("resnet50"))
	if err != nil {
		t.Fatal(err)
	}
	png := append([]byte("\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR"), make([]byte, 64)...)
	empty, _ := proto.Marshal(&onnxpb.ModelProto{DocString: proto.String("just a doc string")})
	noNodes, _ := proto.Marshal(&onnxpb.ModelProto{IrVersion: proto.Int64(8), Graph: &onnxpb.GraphProto{}})
	noGraph, _ := proto.Marshal(&onnxpb.ModelProto{IrVersion: proto.Int64(8), ProducerName: proto.String("x")})
	noIR, _ := proto.Marshal(&onnxpb.ModelProto{Graph: &onnxpb.GraphProto{Node: []*onnxpb.NodeProto{{OpType: proto.String("Relu")}}}})

	cycle := newModel(17).input("x", f32, 2).
		node("Add", strs("x", "b"), strs("a")).node("Relu", strs("a"), strs("b")).output("b")
	dangling := newModel(17).input("x", f32, 2).node("Add", strs("x", "ghost"), strs("y")).output("y")
	dup := newModel(17).input("x", f32, 2).node("Relu", strs("x"), strs("y")).node("Neg", strs("x"), strs("y")).output("y")
	broadcastErr := newModel(17).input("x", f32, 2, 3).input("z", f32, 4).node("Add", strs("x", "z"), strs("y")).output("y")
	badReshape := newModel(17).input("x", f32, 2, 3).ints("s", []int64{1}, 7).node("Reshape", strs("x", "s"), strs("y")).output("y")
	// A reshape target with the export's batch in it, planned at another.
	bakedBatch := newModel(17).input("x", f32, 2, 6).ints("s", []int64{3}, 2, 3, 2).node("Reshape", strs("x", "s"), strs("y")).output("y")
	huge := newModel(17).input("x", f32, 1<<20, 1<<20).ints("s", []int64{3}, 1<<20, 1<<20, 1<<20).
		node("Expand", strs("x", "s"), strs("y")).output("y")
	unbound := newModel(17).symInput("input_ids", i64, "batch", 128).node("Relu", strs("input_ids"), strs("y")).output("y")
	noSuchShape := newModel(17).input("x", f32, 2).node("Relu", strs("x"), strs("y")).output("y")
	// IR < 4 style: weight w listed as a graph input too, its initializer
	// the default; clash declares it 4×3 against an 8×8 initializer.
	asInput := newModel(17).input("x", f32, 2, 4).input("w", f32, 4, 3).weight("w", 4, 3).node("MatMul", strs("x", "w"), strs("y")).output("y")
	clash := newModel(17).input("x", f32, 2, 4).input("w", f32, 4, 3).weight("w", 8, 8).node("MatMul", strs("x", "w"), strs("y")).output("y")
	// A 3-channel convolution planned at 4 channels through Shapes.
	conv := newModel(17).input("x", f32, 1, 3, 8, 8).weight("k", 2, 3, 3, 3).node("Conv", strs("x", "k"), strs("y")).output("y")
	// 520 activations of 2^51 bytes each: every tensor is legal, their
	// sum passes 2^60 bytes.
	manyBig := newModel(17).input("x", f32, 1<<25, 1<<24)
	for i := 0; i < 520; i++ {
		manyBig.node("Identity", strs(fmt.Sprintf("t%d", i)), strs(fmt.Sprintf("t%d", i+1)))
	}
	manyBig.m.Graph.Node[0].Input = strs("x")
	manyBig.output("t520")

	// A transpose whose perm is a string would read as no perm at all.
	stringPerm := newModel(17).input("x", f32, 2, 3).node("Transpose", strs("x"), strs("y"),
		&onnxpb.AttributeProto{Name: proto.String("perm"), Type: onnxpb.AttributeProto_STRING.Enum(), S: []byte("1,0")}).output("y")

	cases := []struct {
		name string
		path string // for Load; empty to Decode data
		data []byte
		opts Options
		want string
	}{
		{name: "missing file", path: filepath.Join(dir, "nope.onnx"), want: "nope.onnx: no such file"},
		{name: "directory", path: dir, want: "is a directory"},
		{name: "empty file", path: write("empty.onnx", nil), want: "empty.onnx: empty file"},
		{name: "png", path: write("picture.onnx", png), want: "picture.onnx: not an ONNX model"},
		{name: "truncated", path: write("half.onnx", real[:len(real)/2]), want: "half.onnx: not an ONNX model"},
		{name: "empty message", data: empty, want: "no ir_version"},
		{name: "no graph", data: noGraph, want: "no graph"},
		{name: "no nodes", data: noNodes, want: "has no nodes"},
		{name: "no ir version", data: noIR, want: "no ir_version"},
		{name: "cycle", data: cycle.bytes(t), want: "the graph has a cycle"},
		{name: "dangling input", data: dangling.bytes(t), want: `reads "ghost", which no node, graph input or initializer produces`},
		{name: "duplicate outputs", data: dup.bytes(t), want: `tensor "y" is produced twice`},
		{name: "broadcast mismatch", data: broadcastErr.bytes(t), want: `node "Add_0" (Add): shapes [2 3] and [4] do not broadcast`},
		{name: "impossible reshape", data: badReshape.bytes(t), want: `node "Reshape_0" (Reshape): cannot reshape`},
		{name: "batch baked into a reshape", data: bakedBatch.bytes(t), opts: Options{Shapes: map[string][]int64{"x": {4, 6}}},
			want: `cannot reshape [4 6] (24 elements) to [2 3 2]; its target shape [2 3 2] (tensor "s") is fixed in the file and holds the batch 2 the model was exported at (input "x" is 2x6 in the file), so this export runs only at batch 2: plan it with Options.Shapes["x"] = []int64{2,6}`},
		{name: "absurd size", data: huge.bytes(t), want: "more than 2^50 elements"},
		{name: "unbound symbolic dim", data: unbound.bytes(t),
			want: `m.onnx: input "input_ids" axis 0 is the symbolic dimension "batch"; bind it with Options.Dims["batch"] = N or Options.Batch = N`},
		{name: "unbound symbolic dim, caller's knobs", data: unbound.bytes(t), opts: Options{Knobs: Fields{Prefix: "cfg."}},
			want: `bind it with cfg.Dims["batch"] = N or cfg.Batch = N`},
		{name: "unknown Shapes input", data: noSuchShape.bytes(t), opts: Options{Shapes: map[string][]int64{"y": {1}}},
			want: `Options.Shapes["y"]: the model has no input named "y"`},
		{name: "Shapes naming a weight", data: asInput.bytes(t), opts: Options{Shapes: map[string][]int64{"w": {4, 3}}},
			want: `Options.Shapes["w"]: "w" is a weight of the model (an initializer), whose shape the file fixes, not an input (inputs: [x])`},
		{name: "Shapes of the wrong rank", data: noSuchShape.bytes(t), opts: Options{Shapes: map[string][]int64{"x": {1, 2}}},
			want: `Options.Shapes["x"] = []int64{1,2}: the model declares x with 1 axis (2), the shape given has 2`},
		{name: "Shapes changing a fixed axis", data: conv.bytes(t), opts: Options{Shapes: map[string][]int64{"x": {1, 4, 8, 8}}},
			want: `node "Conv_0" (Conv): input channels 4 / group 1 do not match weight [2 3 3 3]; Options.Shapes["x"] = []int64{1,4,8,8} sets axis 1 of input "x" to 4, where the model declares 3`},
		{name: "initializer clashing with its input", data: clash.bytes(t),
			want: `graph input "w" is declared float32 [4,3], but the initializer of the same name, which gives the input its default value, is float32 [8,8]`},
		{name: "negative batch", data: noSuchShape.bytes(t), opts: Options{Batch: -1}, want: "the batch size -1 must be positive"},
		{name: "zero dim", data: unbound.bytes(t), opts: Options{Dims: map[string]int64{"batch": 0}},
			want: `dimension "batch" bound to 0: a dimension must be positive`},
		{name: "zero shape", data: unbound.bytes(t), opts: Options{Shapes: map[string][]int64{"input_ids": {4, 0}}},
			want: `the shape given for input "input_ids" has size 0 on axis 1: a dimension must be positive`},
		// 1e10 tokens: the output head alone is 1.6e18 FLOPs. (At 3e9
		// tokens every op fits, and the step, 3e19 FLOPs, is summed in
		// float64.)
		{name: "FLOPs past 2^60", path: modelPath("gpt2_xl"), opts: Options{Dims: map[string]int64{"batch": 10000000}},
			want: `op "/head/MatMul" (MatMul, output 10000000x1024x50257): its FLOPs reach 2^60 (1.15e18), beyond any op of a real model's step; bind a smaller batch or dimension`},
		{name: "attribute of the wrong type", data: stringPerm.bytes(t),
			want: `node #0 (Transpose): attribute "perm" is a STRING, but ONNX defines it as INTS`},
		{name: "tensor bytes past 2^60", data: manyBig.bytes(t),
			want: `tensor "t511" (float32 33554432x16777216): the graph's tensors reach 2^60 bytes (1 EiB) here`},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var err error
			if tc.path != "" {
				_, err = Load(tc.path, tc.opts)
			} else {
				_, err = Decode(tc.data, "m.onnx", tc.opts)
			}
			if err == nil {
				t.Fatal("no error")
			}
			var ie *InputError
			if !errors.As(err, &ie) {
				t.Fatalf("error %T is not an *InputError: %v", err, err)
			}
			msg := err.Error()
			if !strings.Contains(msg, tc.want) {
				t.Errorf("error %q does not contain %q", msg, tc.want)
			}
			if strings.Contains(msg, "--") && !strings.Contains(tc.want, "--") {
				t.Errorf("a library error names a command-line flag: %q", msg)
			}
			if strings.Contains(msg, "\n") {
				t.Errorf("error spans lines: %q", msg)
			}
			wantFile := tc.path
			if wantFile == "" {
				wantFile = "m.onnx"
			}
			if ie.File != wantFile || !strings.HasPrefix(msg, wantFile+": ") {
				t.Errorf("error does not start with the file name %q: %q", wantFile, msg)
			}
		})
	}
}

func TestCycleErrorWrapped(t *testing.T) {
	b := newModel(17).input("x", f32, 2).
		node("Add", strs("x", "b"), strs("a")).node("Relu", strs("a"), strs("b")).output("b")
	_, err := Decode(b.bytes(t), "cyc.onnx", Options{})
	var ce *graph.CycleError
	if !errors.As(err, &ce) || len(ce.Ops) != 2 {
		t.Fatalf("want a wrapped *graph.CycleError of two ops, got %v", err)
	}
}

// TestInitializerInputs checks that graph inputs which are initializers
// (IR < 4 style) are parameters, not inputs, and that Model reports them
// so.
func TestInitializerInputs(t *testing.T) {
	b := newModel(9).input("x", f32, 2, 4).weight("w", 4, 3).input("w", f32, 4, 3).
		node("MatMul", strs("x", "w"), strs("y")).output("y")
	m, err := Decode(b.bytes(t), "init.onnx", Options{})
	if err != nil {
		t.Fatal(err)
	}
	g := m.Graph
	if len(g.Inputs) != 1 || g.Tensor(g.Inputs[0]).Name != "x" {
		t.Errorf("inputs = %v", g.Inputs)
	}
	w, _ := g.TensorByName("w")
	if g.Tensor(w).Kind != graph.Parameter {
		t.Errorf("w is a %s", g.Tensor(w).Kind)
	}
	if m.Opset != 9 {
		t.Errorf("opset %d", m.Opset)
	}
}

// TestEmptyInputWarning checks that an input the model declares with a
// 0 dimension imports (an empty tensor is legal ONNX) with a warning
// naming the input and axis, since every op it reaches then costs nothing.
func TestEmptyInputWarning(t *testing.T) {
	b := newModel(17).input("x", f32, 4, 0).weight("w", 0, 8).node("MatMul", strs("x", "w"), strs("y")).output("y")
	m, err := Decode(b.bytes(t), "empty.onnx", Options{})
	if err != nil {
		t.Fatal(err)
	}
	want := `input "x" axis 1 has size 0 in the model: the tensor is empty, and so is the work of every op that depends on it`
	if !slices.Contains(m.Warnings, want) {
		t.Errorf("warnings %q lack %q", m.Warnings, want)
	}
}

func TestFutureOpsetWarning(t *testing.T) {
	tests := []struct {
		opset int64
		warns bool
	}{{17, false}, {NewestOpset, false}, {NewestOpset + 1, true}, {99, true}}
	for _, tt := range tests {
		b := newModel(tt.opset).input("x", f32, 2, 3).node("Relu", strs("x"), strs("y")).output("y")
		m, err := Decode(b.bytes(t), "m.onnx", Options{})
		if err != nil {
			t.Fatal(err)
		}
		want := fmt.Sprintf("the model imports ai.onnx opset %d, newer than the newest this importer knows (%d)", tt.opset, NewestOpset)
		got := slices.ContainsFunc(m.Warnings, func(w string) bool { return strings.HasPrefix(w, want) })
		if got != tt.warns {
			t.Errorf("opset %d: warnings %q; want a warning %v", tt.opset, m.Warnings, tt.warns)
		}
	}
}
