package onnx

import (
	"slices"
	"strconv"
	"strings"
	"testing"

	"github.com/opplace/opplace/graph"
	"github.com/opplace/opplace/onnx/onnxpb"
	"github.com/opplace/opplace/train"
	"google.golang.org/protobuf/proto"
)

// scalar adds a one-element float initializer (a GELU's 0.5, a scale).
func (b *modelBuilder) scalar(name string, v float32) *modelBuilder {
	b.m.Graph.Initializer = append(b.m.Graph.Initializer, floatTensor(name, nil, v))
	return b
}

// constant adds a Constant node holding a float tensor of these dims
// whose data lives in an absent file, as weights do.
func (b *modelBuilder) constant(name string, dims ...int64) *modelBuilder {
	t := &onnxpb.TensorProto{Name: proto.String(name), DataType: proto.Int32(f32), Dims: dims,
		DataLocation: onnxpb.TensorProto_EXTERNAL.Enum(),
		ExternalData: []*onnxpb.StringStringEntryProto{{Key: proto.String("location"), Value: proto.String("absent.bin")}}}
	if len(dims) == 0 {
		t = floatTensor(name, nil, 0.5)
	}
	return b.node("Constant", nil, strs(name), aTensor("value", t))
}

// TestTrainable checks which stored tensors the importer makes trained
// parameters and which buffers, and that the training step updates
// exactly the parameters.
func TestTrainable(t *testing.T) {
	for _, tc := range []struct {
		name     string
		model    *modelBuilder
		params   []string // trained, in any order
		buffers  []string
		promoted int // Constant nodes taken as parameters
	}{
		{
			name: "weights as Constant nodes (an inference export)",
			model: newModel(17).input("x", f32, 1, 3, 8, 8).constant("w", 4, 3, 3, 3).constant("b", 4).constant("half").
				node("Conv", strs("x", "w", "b"), strs("c"), aInts("kernel_shape", 3, 3)).
				node("Mul", strs("c", "half"), strs("y")).output("y"),
			params: []string{"w", "b"}, promoted: 2,
		},
		{
			name: "attention with a mask and scalars as initializers",
			model: newModel(17).input("x", f32, 2, 8, 16).weight("W", 16, 16).weight("bias", 16).
				scalar("scale", 4).weight("mask", 8, 8).scalar("half", 0.5).
				node("MatMul", strs("x", "W"), strs("q")).node("Add", strs("q", "bias"), strs("qb")).
				node("Transpose", strs("qb"), strs("kt"), aInts("perm", 0, 2, 1)).
				node("MatMul", strs("qb", "kt"), strs("s")).node("Div", strs("s", "scale"), strs("sd")).
				node("Add", strs("sd", "mask"), strs("sm")).node("Softmax", strs("sm"), strs("p")).
				node("Mul", strs("p", "half"), strs("y")).output("y"),
			params: []string{"W", "bias"}, buffers: []string{"scale", "mask", "half"},
		},
		{
			name: "BatchNormalization's running statistics",
			model: newModel(17).input("x", f32, 1, 4, 8, 8).weight("gamma", 4).weight("beta", 4).weight("mean", 4).weight("var", 4).
				node("BatchNormalization", strs("x", "gamma", "beta", "mean", "var"), strs("y")).output("y"),
			params: []string{"gamma", "beta"}, buffers: []string{"mean", "var"},
		},
		{
			name: "a decomposed norm's scale, a rotary table, a position embedding",
			model: newModel(17).input("x", f32, 2, 8, 16).weight("g", 16).weight("cos", 8, 16).weight("pos", 8, 16).
				node("Mul", strs("x", "g"), strs("n")).node("Mul", strs("n", "cos"), strs("r")).
				node("Add", strs("r", "pos"), strs("y")).output("y"),
			params: []string{"g", "pos"}, buffers: []string{"cos"},
		},
		{
			name: "weights read through Transpose and Identity, an RNN's initial state",
			model: newModel(17).input("x", f32, 2, 16).weight("W", 16, 16).weight("R", 16, 16).weight("h0", 2, 16).
				node("Transpose", strs("W"), strs("Wt")).node("Identity", strs("R"), strs("Ri")).
				node("MatMul", strs("x", "Wt"), strs("a")).node("Gemm", strs("h0", "Ri"), strs("b")).
				node("Add", strs("a", "b"), strs("y")).output("y"),
			params: []string{"W", "R"}, buffers: []string{"h0"},
		},
		{
			name: "a class token joined to the activations",
			model: newModel(17).input("x", f32, 1, 8, 16).weight("cls", 1, 1, 16).
				node("Concat", strs("cls", "x"), strs("y"), aInt("axis", 1)).output("y"),
			params: []string{"cls"},
		},
		{
			name:    "no weights at all",
			model:   newModel(17).input("x", f32, 8, 16).scalar("half", 0.5).node("Mul", strs("x", "half"), strs("y")).output("y"),
			buffers: []string{"half"},
		},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m, err := Decode(tc.model.bytes(t), "m.onnx", Options{})
			if err != nil {
				t.Fatal(err)
			}
			g := m.Graph
			var params []string
			var paramBytes int64
			for i := range g.Tensors {
				if tt := &g.Tensors[i]; tt.Kind == graph.Parameter {
					params = append(params, tt.Name)
					paramBytes += tt.Bytes()
					if tt.Producer != graph.NoOp {
						t.Errorf("parameter %s is written by op %s", tt.Name, g.Ops[tt.Producer].Name)
					}
				}
			}
			slices.Sort(params)
			want := slices.Sorted(slices.Values(tc.params))
			if !slices.Equal(params, want) {
				t.Errorf("parameters %v, want %v", params, want)
			}
			for _, name := range tc.buffers {
				id, ok := g.TensorByName(name)
				if !ok {
					t.Fatalf("no tensor %s", name)
				}
				if k := g.Tensors[id].Kind; k == graph.Parameter {
					t.Errorf("buffer %s is a %s", name, k)
				}
			}
			warned := slices.ContainsFunc(m.Warnings, func(w string) bool {
				return strings.HasPrefix(w, strconv.Itoa(tc.promoted)+" Constant node(s) hold weights")
			})
			if warned != (tc.promoted > 0) || tc.promoted == 0 && len(m.Warnings) > 0 {
				t.Errorf("warnings %q; want one only when Constant nodes are taken as parameters (%d)", m.Warnings, tc.promoted)
			}
			step, st, err := train.Build(g, train.Options{Optimizer: train.Adam})
			if err != nil {
				t.Fatal(err)
			}
			if st.Update != len(tc.params) || st.StateBytes != 2*paramBytes {
				t.Errorf("%d updates with %d bytes of Adam state, want %d and %d", st.Update, st.StateBytes, len(tc.params), 2*paramBytes)
			}
			if (st.Backward > 0) != (len(tc.params) > 0) {
				t.Errorf("%d backward ops for %d parameters", st.Backward, len(tc.params))
			}
			for i := range step.Ops {
				if op := &step.Ops[i]; op.Phase == graph.Update && !slices.Contains(tc.params, step.Tensors[op.Inputs[0]].Name) {
					t.Errorf("update %s of a buffer", op.Name)
				}
			}
		})
	}
}
