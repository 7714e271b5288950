package graph_test

import (
	"slices"
	"testing"

	"github.com/opplace/opplace/graph"
)

// attnGraph builds an attention core by hand: q, k, v of b×h×s×d from
// one input, then the ops steps lists between the scores and ·V.
type attnGraph struct {
	g *graph.Graph
	t map[string]graph.TensorID
}

func newAttnGraph(t *testing.T) *attnGraph {
	a := &attnGraph{g: graph.New("attn", 0, 0), t: map[string]graph.TensorID{}}
	a.tensor(t, "x", graph.Input, 2, 4, 8, 16)
	for _, n := range []string{"q", "k", "v"} {
		a.op(t, "/attn/"+n, "Identity", nil, []string{"x"}, n, 2, 4, 8, 16)
	}
	return a
}

func (a *attnGraph) tensor(t *testing.T, name string, kind graph.TensorKind, shape ...int64) {
	t.Helper()
	id, err := a.g.AddTensor(graph.Tensor{Name: name, DType: graph.Float32, Shape: shape, ShapeKnown: true, Kind: kind})
	if err != nil {
		t.Fatal(err)
	}
	a.t[name] = id
}

func (a *attnGraph) op(t *testing.T, name, typ string, attrs graph.Attrs, ins []string, out string, shape ...int64) {
	t.Helper()
	a.tensor(t, out, graph.Activation, shape...)
	op := graph.Op{Name: name, Type: typ, Attrs: attrs, Outputs: []graph.TensorID{a.t[out]}}
	for _, in := range ins {
		op.Inputs = append(op.Inputs, a.t[in])
	}
	if _, err := a.g.AddOp(op); err != nil {
		t.Fatal(err)
	}
}

// TestFuseAttention: the patterns exporters write become one Attention op
// that reads Q, K, V (and a mask computed from inputs) and writes the ·V
// product's tensor; a pattern whose intermediates another op reads, or a
// softmax over another axis, is left alone.
func TestFuseAttention(t *testing.T) {
	perm := graph.Attrs{"perm": {Kind: graph.AttrInts, Ints: []int64{0, 1, 3, 2}}}
	scores := []int64{2, 4, 8, 8}
	for _, tc := range []struct {
		name   string
		build  func(t *testing.T, a *attnGraph)
		fused  int
		causal bool
		covers int
		inputs int // of the fused op
	}{
		{"transpose, divide, causal buffer", func(t *testing.T, a *attnGraph) {
			a.tensor(t, "scale", graph.Constant)
			a.tensor(t, "bias", graph.Constant, 1, 1, 8, 8)
			a.op(t, "/attn/Transpose", "Transpose", perm, []string{"k"}, "kt", 2, 4, 16, 8)
			a.op(t, "/attn/MatMul", "MatMul", nil, []string{"q", "kt"}, "s", scores...)
			a.op(t, "/attn/Div", "Div", nil, []string{"s", "scale"}, "s1", scores...)
			a.op(t, "/attn/Add", "Add", nil, []string{"s1", "bias"}, "s2", scores...)
			a.op(t, "/attn/Softmax", "Softmax", nil, []string{"s2"}, "p", scores...)
			a.op(t, "/attn/MatMul_1", "MatMul", nil, []string{"p", "v"}, "y", 2, 4, 8, 16)
		}, 1, true, 6, 3},
		{"scale, masked_fill from an input, dropout", func(t *testing.T, a *attnGraph) {
			a.tensor(t, "scale", graph.Constant)
			a.tensor(t, "ninf", graph.Constant)
			a.tensor(t, "pad", graph.Input, 2, 1, 1, 8)
			a.op(t, "/attn/Transpose", "Transpose", perm, []string{"k"}, "kt", 2, 4, 16, 8)
			a.op(t, "/attn/MatMul", "MatMul", nil, []string{"q", "kt"}, "s", scores...)
			a.op(t, "/attn/Mul", "Mul", nil, []string{"scale", "s"}, "s1", scores...)
			a.op(t, "/attn/Where", "Where", nil, []string{"pad", "s1", "ninf"}, "s2", scores...)
			a.op(t, "/attn/Softmax", "Softmax", graph.Attrs{"axis": {Kind: graph.AttrInt, Int: 3}}, []string{"s2"}, "p", scores...)
			a.op(t, "/attn/Dropout", "Dropout", nil, []string{"p"}, "pd", scores...)
			a.op(t, "/attn/MatMul_1", "MatMul", nil, []string{"pd", "v"}, "y", 2, 4, 8, 16)
		}, 1, false, 7, 4},
		{"probabilities read twice", func(t *testing.T, a *attnGraph) {
			a.op(t, "/attn/Transpose", "Transpose", perm, []string{"k"}, "kt", 2, 4, 16, 8)
			a.op(t, "/attn/MatMul", "MatMul", nil, []string{"q", "kt"}, "s", scores...)
			a.op(t, "/attn/Softmax", "Softmax", nil, []string{"s"}, "p", scores...)
			a.op(t, "/attn/MatMul_1", "MatMul", nil, []string{"p", "v"}, "y", 2, 4, 8, 16)
			a.op(t, "/attn/ReduceMean", "ReduceMean", nil, []string{"p"}, "m", 2, 4, 8, 1)
		}, 0, false, 0, 0},
		{"softmax over another axis", func(t *testing.T, a *attnGraph) {
			a.op(t, "/attn/Transpose", "Transpose", perm, []string{"k"}, "kt", 2, 4, 16, 8)
			a.op(t, "/attn/MatMul", "MatMul", nil, []string{"q", "kt"}, "s", scores...)
			a.op(t, "/attn/Softmax", "Softmax", graph.Attrs{"axis": {Kind: graph.AttrInt, Int: 2}}, []string{"s"}, "p", scores...)
			a.op(t, "/attn/MatMul_1", "MatMul", nil, []string{"p", "v"}, "y", 2, 4, 8, 16)
		}, 0, false, 0, 0},
	} {
		t.Run(tc.name, func(t *testing.T) {
			a := newAttnGraph(t)
			tc.build(t, a)
			a.g.Outputs = []graph.TensorID{a.t["y"]}
			before := len(a.g.Ops)
			out, fused, err := graph.FuseAttention(a.g)
			if err != nil {
				t.Fatal(err)
			}
			if len(a.g.Ops) != before {
				t.Fatal("FuseAttention changed its input graph")
			}
			if len(fused) != tc.fused {
				t.Fatalf("%d patterns fused, want %d", len(fused), tc.fused)
			}
			if tc.fused == 0 {
				if out != a.g {
					t.Error("a graph with nothing fused should come back as is")
				}
				return
			}
			if err := graph.Check(out); err != nil {
				t.Fatal(err)
			}
			f := fused[0]
			if f.Causal != tc.causal || len(f.Covers) != tc.covers {
				t.Errorf("causal %v, covers %v; want %v and %d ops", f.Causal, f.Covers, tc.causal, tc.covers)
			}
			if len(out.Ops) != before-tc.covers+1 {
				t.Errorf("%d ops after, want %d", len(out.Ops), before-tc.covers+1)
			}
			id, ok := out.OpByName(f.Op)
			if !ok || f.Op != "/attn/Attention" {
				t.Fatalf("fused op %q not in the graph", f.Op)
			}
			op := out.Ops[id]
			if op.Type != "Attention" || op.Domain != graph.AttentionDomain || len(op.Inputs) != tc.inputs {
				t.Errorf("fused op %s.%s reads %d tensors, want Attention reading %d", op.Domain, op.Type, len(op.Inputs), tc.inputs)
			}
			if name := out.Tensors[op.Outputs[0]].Name; name != "y" || !slices.Equal(out.Outputs, op.Outputs) {
				t.Errorf("fused op writes %q, want the graph output y", name)
			}
			if k := out.Tensors[op.Inputs[1]].Name; k != "k" {
				t.Errorf("K is %q, want the Transpose folded (k)", k)
			}
			// 4·b·h·s·s·d MACs and 5 FLOPs a score, halved when causal.
			macs, flops := int64(2*4*8*8*(16+16)), int64(2*2*4*8*8*(16+16)+5*2*4*8*8)
			if tc.causal {
				macs, flops = macs/2, flops/2
			}
			if op.Work.MACs != macs || op.Work.FLOPs != flops {
				t.Errorf("work %d MACs %d FLOPs, want %d and %d", op.Work.MACs, op.Work.FLOPs, macs, flops)
			}
			if _, ok := out.TensorByName("s"); ok {
				t.Error("the score tensor is still in the graph")
			}
		})
	}
}
