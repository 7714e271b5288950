package graph_test

import (
	"fmt"
	"testing"

	"github.com/opplace/opplace/graph"
)

// TestTrainableJoins checks weights read through long chains of joins
// and TensorFlow's spellings: a weight doubled by Concat 64 times (2^64
// copies if each join listed its parts) and split by Split(axis, value)
// is still one weight, read by a MatMul; the int axis is a buffer.
func TestTrainableJoins(t *testing.T) {
	g := graph.New("joins", 0, 0)
	add := func(name string, dt graph.DType, kind graph.TensorKind, shape ...int64) graph.TensorID {
		id, err := g.AddTensor(graph.Tensor{Name: name, DType: dt, Kind: kind, Shape: shape, ShapeKnown: true})
		if err != nil {
			t.Fatal(err)
		}
		return id
	}
	op := func(name, typ string, ins []graph.TensorID, outs ...graph.TensorID) {
		if _, err := g.AddOp(graph.Op{Name: name, Type: typ, Inputs: ins, Outputs: outs}); err != nil {
			t.Fatal(err)
		}
	}
	x := add("x", graph.Float32, graph.Input, 2, 4)
	w := add("w", graph.Float32, graph.Parameter, 4, 1)
	axis := add("axis", graph.Int32, graph.Parameter)
	half := add("half", graph.Float32, graph.Parameter)
	cur := w
	for i := range 64 {
		next := add(fmt.Sprintf("c%d", i), graph.Float32, graph.Activation)
		op(fmt.Sprintf("concat%d", i), "ConcatV2", []graph.TensorID{cur, cur, axis}, next)
		cur = next
	}
	part := add("part", graph.Float32, graph.Activation)
	op("split", "Split", []graph.TensorID{axis, cur}, part)
	y := add("y", graph.Float32, graph.Activation)
	op("mm", "MatMul", []graph.TensorID{x, part}, y)
	z := add("z", graph.Float32, graph.Activation)
	op("mul", "Mul", []graph.TensorID{y, half}, z)
	train := graph.Trainable(g)
	for id, want := range map[graph.TensorID]bool{w: true, axis: false, half: false, x: false} {
		if train[id] != want {
			t.Errorf("%s: trainable %v, want %v", g.Tensors[id].Name, train[id], want)
		}
	}
	out, promoted, err := graph.MarkTrainable(g)
	if err != nil || promoted != 0 || out != g {
		t.Fatalf("MarkTrainable: %d promoted, same graph %v, %v", promoted, out == g, err)
	}
	if g.Tensors[w].Kind != graph.Parameter || g.Tensors[half].Kind != graph.Constant || g.Tensors[axis].Kind != graph.Constant {
		t.Errorf("kinds: w %s, half %s, axis %s", g.Tensors[w].Kind, g.Tensors[half].Kind, g.Tensors[axis].Kind)
	}
}
