package graph_test

import (
	"testing"

	"github.com/opplace/opplace/graph"
)

// TestFusionJoinsSoftColocation: a Conv+Relu chain whose ops each carry
// their own soft key (as the training step gives them) fuses, and the
// gradients colocated with either op end up under the one fused key; a
// hard key the model gave is never joined.
func TestFusionJoinsSoftColocation(t *testing.T) {
	build := func(reluKey string) *graph.Graph {
		g := graph.New("t", 0, 0)
		add := func(name string) graph.TensorID {
			id, err := g.AddTensor(graph.Tensor{Name: name, DType: graph.Float32, Shape: []int64{4}, ShapeKnown: true})
			if err != nil {
				t.Fatal(err)
			}
			return id
		}
		x := add("x")
		g.Tensors[x].Kind = graph.Input
		c, r, dc, dr := add("c"), add("r"), add("dc"), add("dr")
		ops := []graph.Op{
			{Name: "conv", Type: "Conv", Inputs: []graph.TensorID{x}, Outputs: []graph.TensorID{c}, Colocate: "~conv"},
			{Name: "relu", Type: "Relu", Inputs: []graph.TensorID{c}, Outputs: []graph.TensorID{r}, Colocate: reluKey},
			{Name: "relu/grad", Type: "ReluGrad", Phase: graph.Backward, Inputs: []graph.TensorID{r, c}, Outputs: []graph.TensorID{dr}, Colocate: reluKey},
			{Name: "conv/grad", Type: "ConvGrad", Phase: graph.Backward, Inputs: []graph.TensorID{dr, x}, Outputs: []graph.TensorID{dc}, Colocate: "~conv"},
		}
		for _, op := range ops {
			if _, err := g.AddOp(op); err != nil {
				t.Fatal(err)
			}
		}
		return g
	}

	g := build("~relu")
	fu, err := graph.Fuse(g, g.BuildAdjacency(), "vertical")
	if err != nil {
		t.Fatal(err)
	}
	if fu.Groups.Find(0) != fu.Groups.Find(1) {
		t.Fatal("conv and relu did not fuse although the conv output is read only by relu and gradients")
	}
	key := g.Ops[0].Colocate
	for _, op := range g.Ops {
		if op.Colocate != key {
			t.Errorf("op %s has key %q, want the fused %q", op.Name, op.Colocate, key)
		}
	}

	g = build("model-group")
	fu, err = graph.Fuse(g, g.BuildAdjacency(), "vertical")
	if err != nil {
		t.Fatal(err)
	}
	if fu.Groups.Find(0) == fu.Groups.Find(1) || g.Ops[1].Colocate != "model-group" || g.Ops[0].Colocate != "~conv" {
		t.Error("fusion joined a soft group with a hard one")
	}
}
