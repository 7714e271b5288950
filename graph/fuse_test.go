package graph_test

import (
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/opplace/opplace/graph"
	"github.com/opplace/opplace/graph/graphtest"
)

// typed adds an op of the given type through graphtest's builder.
func typed(b *graphtest.Builder, name, typ string, flops, out int64, inputs ...string) {
	b.Op(name, flops, out, inputs...)
	b.G.Ops[len(b.G.Ops)-1].Type = typ
}

// groupsOf renders a fusion's multi-op groups by op name.
func groupsOf(g *graph.Graph, gr *graph.Grouping) [][]string {
	var out [][]string
	for _, grp := range gr.Groups() {
		if len(grp) < 2 {
			continue
		}
		var names []string
		for _, op := range grp {
			names = append(names, g.Ops[op].Name)
		}
		out = append(out, names)
	}
	return out
}

func fuse(t *testing.T, g *graph.Graph, mode string) *graph.Fusion {
	t.Helper()
	fu, err := graph.Fuse(g, g.BuildAdjacency(), mode)
	if err != nil {
		t.Fatal(err)
	}
	return fu
}

func TestFusionPatterns(t *testing.T) {
	// conv -> bn -> relu, with the relu also a graph output.
	convBNReLU := func() *graph.Graph {
		b := graphtest.New("cbr").Input("x", 100).Param("w", 10).Param("s", 4)
		typed(b, "conv", "Conv", 1000, 100, "x", "w")
		typed(b, "bn", "BatchNormalization", 10, 100, "conv", "s")
		typed(b, "relu", "Relu", 10, 100, "bn")
		return b.Output("relu").G
	}
	// matmul -> bias add -> GELU expanded as ONNX exports it:
	// y = (x * (erf(x / c) + 1)) * 0.5, x read by Div and the first Mul.
	matmulGELU := func() *graph.Graph {
		b := graphtest.New("mlp").Input("x", 64).Param("w", 64).Param("bias", 8).Param("c", 4).Param("one", 4).Param("half", 4)
		typed(b, "mm", "MatMul", 2000, 64, "x", "w")
		typed(b, "add", "Add", 64, 64, "mm", "bias")
		typed(b, "div", "Div", 64, 64, "add", "c")
		typed(b, "erf", "Erf", 64, 64, "div")
		typed(b, "add1", "Add", 64, 64, "erf", "one")
		typed(b, "mul", "Mul", 64, 64, "add", "add1")
		typed(b, "mul1", "Mul", 64, 64, "mul", "half")
		typed(b, "mm2", "MatMul", 2000, 64, "mul1", "w")
		return b.Output("mm2").G
	}
	// q/k/v projections of one hidden state, each with a bias add.
	qkv := func() *graph.Graph {
		b := graphtest.New("qkv").Input("h", 64).Param("wq", 64).Param("wk", 64).Param("wv", 64).Param("bq", 8).Param("bk", 8).Param("bv", 8)
		typed(b, "ln", "LayerNormalization", 100, 64, "h")
		for _, p := range []string{"q", "k", "v"} {
			typed(b, p, "MatMul", 1000, 64, "ln", "w"+p)
			typed(b, p+"_bias", "Add", 64, 64, p, "b"+p)
		}
		typed(b, "scores", "MatMul", 500, 64, "q_bias", "k_bias")
		typed(b, "soft", "Softmax", 50, 64, "scores")
		typed(b, "ctx", "MatMul", 500, 64, "soft", "v_bias")
		return b.Output("ctx").G
	}
	// an Inception block: three parallel 1x1 convs (one followed by a 3x3)
	// and a pooling branch, concatenated.
	inception := func() *graph.Graph {
		b := graphtest.New("inc").Input("x", 100).Param("w1", 16).Param("w2", 16).Param("w3", 16).Param("w33", 36)
		for _, n := range []string{"1", "2", "3"} {
			typed(b, "c"+n, "Conv", 500, 100, "x", "w"+n)
			typed(b, "r"+n, "Relu", 10, 100, "c"+n)
		}
		typed(b, "c33", "Conv", 900, 100, "r3", "w33")
		typed(b, "pool", "AveragePool", 50, 100, "x")
		typed(b, "cat", "Concat", 0, 400, "r1", "r2", "c33", "pool")
		return b.Output("cat").G
	}
	for _, g := range []*graph.Graph{inception()} {
		for i := range g.Ops {
			if g.Ops[i].Type == "Conv" {
				g.Ops[i].Attrs = graph.Attrs{"kernel_shape": {Kind: graph.AttrInts, Ints: []int64{1, 1}}}
			}
		}
		g.Ops[6].Attrs = graph.Attrs{"kernel_shape": {Kind: graph.AttrInts, Ints: []int64{3, 3}}} // c33
	}

	tests := []struct {
		name   string
		g      func() *graph.Graph
		mode   string
		groups [][]string
	}{
		{"conv+bn+relu/vertical", convBNReLU, "vertical", [][]string{{"conv", "bn", "relu"}}},
		{"conv+bn+relu/horizontal", convBNReLU, "horizontal", nil},
		{"conv+bn+relu/none", convBNReLU, "none", nil},
		{"matmul+add+gelu/vertical", matmulGELU, "vertical", [][]string{{"mm", "add", "div", "erf", "add1", "mul", "mul1"}}},
		{"qkv/vertical", qkv, "vertical", [][]string{{"q", "q_bias"}, {"k", "k_bias"}, {"v", "v_bias"}}},
		{"qkv/horizontal", qkv, "horizontal", [][]string{{"q", "k", "v"}}},
		{"qkv/hybrid", qkv, "hybrid", [][]string{{"q", "q_bias", "k", "k_bias", "v", "v_bias"}}},
		// c33 is a 3x3: not a sibling of the 1x1s. The pool is another type.
		{"inception/horizontal", inception, "horizontal", [][]string{{"c1", "c2", "c3"}}},
		{"inception/hybrid", inception, "hybrid", [][]string{{"c1", "r1", "c2", "r2", "c3", "r3"}}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			g := tc.g()
			fu := fuse(t, g, tc.mode)
			got := groupsOf(g, fu.Groups)
			if !slices.EqualFunc(got, tc.groups, slices.Equal) {
				t.Errorf("groups = %v, want %v", got, tc.groups)
			}
			want := 0
			for _, grp := range tc.groups {
				want += len(grp) - 1
			}
			if fu.Merged() != want {
				t.Errorf("merged %d, want %d (%v)", fu.Merged(), want, fu.Passes)
			}
			c, err := graph.Coarsen(g, fu.Groups)
			if err != nil {
				t.Fatal(err)
			}
			if len(c.Graph.Ops) != len(g.Ops)-want {
				t.Errorf("coarse graph has %d ops, want %d", len(c.Graph.Ops), len(g.Ops)-want)
			}
		})
	}
}

// A chain whose middle tensor is also read elsewhere cannot fuse that
// edge: the tensor must still be written to memory.
func TestVerticalKeepsSharedTensors(t *testing.T) {
	b := graphtest.New("shared").Input("x", 10)
	typed(b, "a", "Relu", 1, 10, "x")
	typed(b, "b", "Sigmoid", 1, 10, "a")
	typed(b, "c", "Softmax", 1, 10, "a")
	typed(b, "d", "Tanh", 1, 10, "b")
	g := b.Output("c", "d").G
	got := groupsOf(g, fuse(t, g, "vertical").Groups)
	if want := [][]string{{"b", "d"}}; !slices.EqualFunc(got, want, slices.Equal) {
		t.Errorf("groups = %v, want %v", got, want)
	}
}

// Two convs in a row stay two kernels; a graph output ends a chain.
func TestVerticalOneAnchorAndOutputs(t *testing.T) {
	b := graphtest.New("two").Input("x", 10).Param("w", 1)
	typed(b, "c1", "Conv", 100, 10, "x", "w")
	typed(b, "r1", "Relu", 1, 10, "c1")
	typed(b, "c2", "Conv", 100, 10, "r1", "w")
	typed(b, "r2", "Relu", 1, 10, "c2")
	typed(b, "r3", "Relu", 1, 10, "r2")
	g := b.Output("r2", "r3").G
	got := groupsOf(g, fuse(t, g, "vertical").Groups)
	if want := [][]string{{"c1", "r1"}, {"c2", "r2"}}; !slices.EqualFunc(got, want, slices.Equal) {
		t.Errorf("groups = %v, want %v", got, want)
	}
}

// Fusion never joins ops under different colocation keys or device pins.
func TestFusionRespectsConstraints(t *testing.T) {
	build := func() *graph.Graph {
		b := graphtest.New("pins").Input("x", 10).Param("w", 1)
		typed(b, "conv", "Conv", 100, 10, "x", "w")
		typed(b, "relu", "Relu", 1, 10, "conv")
		typed(b, "m1", "MatMul", 100, 10, "relu", "w")
		typed(b, "m2", "MatMul", 100, 10, "relu", "w")
		return b.Output("m1", "m2").G
	}
	tests := []struct {
		name   string
		set    func(g *graph.Graph)
		groups [][]string
	}{
		{"free", func(*graph.Graph) {}, [][]string{{"conv", "relu"}, {"m1", "m2"}}},
		{"pinned", func(g *graph.Graph) { g.Ops[1].Device = "gpu1"; g.Ops[3].Device = "gpu1" }, nil},
		{"same pin", func(g *graph.Graph) {
			for i := range g.Ops {
				g.Ops[i].Device = "gpu0"
			}
		}, [][]string{{"conv", "relu"}, {"m1", "m2"}}},
		{"colocated", func(g *graph.Graph) { g.Ops[0].Colocate = "emb"; g.Ops[2].Colocate = "emb" }, nil},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			g := build()
			tc.set(g)
			got := groupsOf(g, fuse(t, g, "hybrid").Groups)
			if !slices.EqualFunc(got, tc.groups, slices.Equal) {
				t.Errorf("groups = %v, want %v", got, tc.groups)
			}
		})
	}
}

// Siblings where one feeds the other through a third op are not merged:
// that would be a cycle.
func TestHorizontalRefusesCycle(t *testing.T) {
	b := graphtest.New("diamond").Input("x", 10).Param("w", 1)
	typed(b, "m1", "MatMul", 100, 10, "x", "w")
	typed(b, "s", "Softmax", 1, 10, "m1")
	typed(b, "m2", "MatMul", 100, 10, "x", "s")
	g := b.Output("m2").G
	if fu := fuse(t, g, "horizontal"); fu.Merged() != 0 {
		t.Errorf("merged %v, want nothing", groupsOf(g, fu.Groups))
	}
}

// The coarse op of a fused chain: FLOPs summed, scratch the largest,
// intermediates gone, external tensors kept with their IDs.
func TestCoarsenCosts(t *testing.T) {
	b := graphtest.New("chain").Input("x", 100).Param("w", 40)
	typed(b, "conv", "Conv", 1000, 200, "x", "w")
	typed(b, "bn", "BatchNormalization", 20, 200, "conv", "w")
	typed(b, "relu", "Relu", 10, 50, "bn")
	typed(b, "pool", "MaxPool", 5, 25, "relu")
	g := b.Output("pool").G
	g.Ops[0].Work.TempBytes = 300
	g.Ops[1].Work.TempBytes = 700
	g.Ops[0].ControlDeps = nil
	fu := fuse(t, g, "vertical")
	c, err := graph.Coarsen(g, fu.Groups)
	if err != nil {
		t.Fatal(err)
	}
	if len(c.Graph.Ops) != 2 {
		t.Fatalf("%d coarse ops, want 2", len(c.Graph.Ops))
	}
	op := c.Graph.Ops[0]
	if op.Name != "conv+bn+relu" || op.Type != graph.FusedType {
		t.Errorf("coarse op %q of type %q", op.Name, op.Type)
	}
	if op.Work.FLOPs != 1030 || op.Work.TempBytes != 700 {
		t.Errorf("work %+v, want 1030 FLOPs and 700 B scratch", op.Work)
	}
	names := func(ids []graph.TensorID) []string {
		var s []string
		for _, id := range ids {
			s = append(s, c.Graph.Tensors[id].Name)
		}
		return s
	}
	if in, out := names(op.Inputs), names(op.Outputs); !slices.Equal(in, []string{"x", "w"}) || !slices.Equal(out, []string{"relu"}) {
		t.Errorf("inputs %v outputs %v, want [x w] [relu]", in, out)
	}
	// The conv output is an intermediate: no producer, no readers.
	if tc := c.Graph.Tensors[2]; tc.Name != "conv" || tc.Producer != graph.NoOp || len(tc.Consumers) != 0 {
		t.Errorf("intermediate %q: producer %d consumers %v", tc.Name, tc.Producer, tc.Consumers)
	}
	if !slices.Equal(c.GroupOf, []graph.OpID{0, 0, 0, 1}) || c.Graph.Ops[1].Name != "pool" {
		t.Errorf("group map %v, second op %q", c.GroupOf, c.Graph.Ops[1].Name)
	}
	if got := graph.Expand(c, []string{"a", "b"}); !slices.Equal(got, []string{"a", "a", "a", "b"}) {
		t.Errorf("Expand = %v", got)
	}
}

// randomFusionDAG builds a graph of n ops of mixed types, each reading one to
// three earlier tensors, with shared inputs so every pass finds work.
func randomFusionDAG(r *rand.Rand, n int) *graph.Graph {
	types := []string{"Conv", "MatMul", "Relu", "Add", "Mul", "Softmax", "Reshape", "Concat"}
	b := graphtest.New("random").Input("x", 16).Param("w", 4)
	names := []string{"x"}
	for i := range n {
		name := "op" + string(rune('A'+i%26)) + string(rune('a'+i/26%26)) + string(rune('0'+i/676))
		k := 1 + r.IntN(3)
		var ins []string
		for range k {
			ins = append(ins, names[max(0, len(names)-1-r.IntN(min(len(names), 6)))])
		}
		typ := types[r.IntN(len(types))]
		if typ == "Conv" || typ == "MatMul" {
			ins = append(ins[:1], "w")
		}
		typed(b, name, typ, int64(1+r.IntN(100)), 16, ins...)
		names = append(names, name)
	}
	return b.Output(names[len(names)-1]).G
}

// quotientAcyclic checks by brute force that a grouping's quotient graph
// has no cycle.
func quotientAcyclic(g *graph.Graph, gr *graph.Grouping) bool {
	adj := g.BuildAdjacency()
	n := len(g.Ops)
	succ := map[graph.OpID]map[graph.OpID]bool{}
	for v := range n {
		for _, s := range adj.Succs(graph.OpID(v)) {
			a, b := gr.Find(graph.OpID(v)), gr.Find(s)
			if a != b {
				if succ[a] == nil {
					succ[a] = map[graph.OpID]bool{}
				}
				succ[a][b] = true
			}
		}
	}
	const white, grey, black = 0, 1, 2
	color := map[graph.OpID]int{}
	var visit func(v graph.OpID) bool
	visit = func(v graph.OpID) bool {
		color[v] = grey
		for s := range succ[v] {
			if color[s] == grey || color[s] == white && !visit(s) {
				return false
			}
		}
		color[v] = black
		return true
	}
	for v := range n {
		r := gr.Find(graph.OpID(v))
		if color[r] == white && !visit(r) {
			return false
		}
	}
	return true
}

// Property: every mode on random DAGs yields an acyclic fusion whose
// coarse graph builds, and a Fuser merging arbitrary random pairs never
// makes a cycle and refuses only merges that would.
func TestFusionNeverCycles(t *testing.T) {
	r := rand.New(rand.NewPCG(1, 2))
	for trial := range 200 {
		g := randomFusionDAG(r, 5+r.IntN(60))
		for _, mode := range graph.FusionModes() {
			fu := fuse(t, g, mode)
			if !quotientAcyclic(g, fu.Groups) {
				t.Fatalf("trial %d mode %s: cyclic fusion %v", trial, mode, groupsOf(g, fu.Groups))
			}
			if _, err := graph.Coarsen(g, fu.Groups); err != nil {
				t.Fatalf("trial %d mode %s: %v", trial, mode, err)
			}
		}
		f, err := graph.NewFuser(g, g.BuildAdjacency())
		if err != nil {
			t.Fatal(err)
		}
		n := len(g.Ops)
		for range 3 * n {
			a, b := graph.OpID(r.IntN(n)), graph.OpID(r.IntN(n))
			if f.Find(a) == f.Find(b) {
				continue
			}
			if f.Merge(a, b) {
				if !quotientAcyclic(g, f.Grouping()) {
					t.Fatalf("trial %d: merging %s and %s made a cycle", trial, g.Ops[a].Name, g.Ops[b].Name)
				}
				continue
			}
			// Refused: merging in a copy must indeed cycle.
			gr := graph.NewGrouping(n)
			for _, grp := range f.Grouping().Groups() {
				for _, m := range grp[1:] {
					gr.Union(grp[0], m)
				}
			}
			gr.Union(a, b)
			if quotientAcyclic(g, gr) {
				t.Fatalf("trial %d: merge of %s and %s refused but acyclic", trial, g.Ops[a].Name, g.Ops[b].Name)
			}
		}
		order := f.Order()
		pos := map[graph.OpID]int{}
		for i, v := range order {
			pos[v] = i
		}
		for _, v := range order {
			for _, s := range f.Succs(v) {
				if pos[s] <= pos[v] {
					t.Fatalf("trial %d: order puts %d before its predecessor %d", trial, s, v)
				}
			}
		}
	}
}

func TestFuseUnknownMode(t *testing.T) {
	g := graphtest.New("x").Input("x", 1).G
	if _, err := graph.Fuse(g, g.BuildAdjacency(), "diagonal"); err == nil {
		t.Fatal("want an error for an unknown mode")
	}
}
