package graph_test

import (
	"errors"
	"fmt"
	"math/rand/v2"
	"reflect"
	"slices"
	"strings"
	"testing"

	"gonum.org/v1/gonum/graph/topo"

	"github.com/opplace/opplace/graph"
	"github.com/opplace/opplace/graph/graphtest"
)

// build makes a graph from op names and their input op names; each op has
// one output tensor named like it.
func build(t testing.TB, ops [][2]any) *graph.Graph {
	g := graph.New("t", len(ops), len(ops))
	for _, o := range ops {
		name := o[0].(string)
		if _, err := g.AddTensor(graph.Tensor{Name: name, DType: graph.Float32, Shape: []int64{1}, ShapeKnown: true}); err != nil {
			t.Fatal(err)
		}
	}
	for _, o := range ops {
		op := graph.Op{Name: o[0].(string)}
		for _, in := range o[1].([]string) {
			id, _ := g.TensorByName(in)
			op.Inputs = append(op.Inputs, id)
		}
		out, _ := g.TensorByName(op.Name)
		op.Outputs = []graph.TensorID{out}
		if _, err := g.AddOp(op); err != nil {
			t.Fatal(err)
		}
	}
	return g
}

func opNames(g *graph.Graph, ids []graph.OpID) []string {
	var out []string
	for _, id := range ids {
		out = append(out, g.Ops[id].Name)
	}
	return out
}

func TestTopoOrderIsStable(t *testing.T) {
	// d and b are both ready after a; b was added first so it comes first,
	// whatever the edge order.
	g := build(t, [][2]any{
		{"a", []string{}}, {"d", []string{"a"}}, {"b", []string{"a"}}, {"c", []string{"b", "d", "b"}},
	})
	adj := g.BuildAdjacency()
	order, err := g.TopoOrder(adj)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := opNames(g, order), []string{"a", "d", "b", "c"}; !reflect.DeepEqual(got, want) {
		t.Errorf("order %v, want %v", got, want)
	}
	if got := opNames(g, adj.Preds(3)); !reflect.DeepEqual(got, []string{"d", "b"}) {
		t.Errorf("preds of c = %v (a tensor read twice must count once)", got)
	}
	if adj.NumEdges() != 4 {
		t.Errorf("edges = %d, want 4", adj.NumEdges())
	}
}

func TestCycleIsNamed(t *testing.T) {
	g := build(t, [][2]any{
		{"in", []string{}}, {"a", []string{"in", "c"}}, {"b", []string{"a"}}, {"c", []string{"b"}}, {"out", []string{"c"}},
	})
	_, err := g.TopoOrder(g.BuildAdjacency())
	var ce *graph.CycleError
	if !errors.As(err, &ce) {
		t.Fatalf("got %v, want a CycleError", err)
	}
	got := slices.Clone(ce.Ops)
	slices.Sort(got)
	if !reflect.DeepEqual(got, []string{"a", "b", "c"}) {
		t.Errorf("cycle %v, want a, b, c", ce.Ops)
	}
	// The named ops really form a cycle, in order.
	for i, name := range ce.Ops {
		next := ce.Ops[(i+1)%len(ce.Ops)]
		id, _ := g.OpByName(next)
		from, _ := g.OpByName(name)
		if !slices.Contains(g.BuildAdjacency().Preds(id), from) {
			t.Errorf("%s does not feed %s", name, next)
		}
	}
}

func TestAddOpRejectsBadWiring(t *testing.T) {
	g := build(t, [][2]any{{"a", []string{}}})
	out, _ := g.TensorByName("a")
	if _, err := g.AddOp(graph.Op{Name: "a"}); err == nil {
		t.Error("duplicate op name accepted")
	}
	if _, err := g.AddOp(graph.Op{Name: "b", Outputs: []graph.TensorID{out}}); err == nil {
		t.Error("second producer of a tensor accepted")
	}
	if _, err := g.AddOp(graph.Op{Name: "c", Inputs: []graph.TensorID{99}}); err == nil {
		t.Error("out-of-range input accepted")
	}
	if _, err := g.AddTensor(graph.Tensor{Name: "a"}); err == nil {
		t.Error("duplicate tensor accepted")
	}
}

// randomDAG makes n ops, each reading up to three earlier ops, added in a
// shuffled order so IDs do not follow the edges.
func randomDAG(t testing.TB, n int, seed uint64) *graph.Graph {
	r := rand.New(rand.NewPCG(seed, 1))
	perm := r.Perm(n)
	ops := make([][2]any, n)
	for i := 0; i < n; i++ {
		var ins []string
		for k := 0; k < 3 && i > 0; k++ {
			if r.IntN(2) == 0 {
				ins = append(ins, fmt.Sprint("op", perm[r.IntN(i)]))
			}
		}
		ops[i] = [2]any{fmt.Sprint("op", perm[i]), ins}
	}
	// Add in ID order of the permutation, not creation order.
	slices.SortFunc(ops, func(a, b [2]any) int { return cmpName(a[0].(string), b[0].(string)) })
	g := graph.New("r", n, n)
	for _, o := range ops {
		if _, err := g.AddTensor(graph.Tensor{Name: o[0].(string)}); err != nil {
			t.Fatal(err)
		}
	}
	for _, o := range ops {
		op := graph.Op{Name: o[0].(string)}
		for _, in := range o[1].([]string) {
			id, _ := g.TensorByName(in)
			op.Inputs = append(op.Inputs, id)
		}
		id, _ := g.TensorByName(op.Name)
		op.Outputs = []graph.TensorID{id}
		if _, err := g.AddOp(op); err != nil {
			t.Fatal(err)
		}
	}
	return g
}

func cmpName(a, b string) int {
	if len(a) != len(b) {
		return len(a) - len(b)
	}
	if a < b {
		return -1
	} else if a > b {
		return 1
	}
	return 0
}

func TestTopoOrderAgainstGonum(t *testing.T) {
	for seed := uint64(0); seed < 20; seed++ {
		g := randomDAG(t, 200, seed)
		adj := g.BuildAdjacency()
		order, err := g.TopoOrder(adj)
		if err != nil {
			t.Fatal(err)
		}
		view := graph.AsDirected(g, adj)
		if _, err := topo.Sort(view); err != nil {
			t.Fatalf("seed %d: gonum finds no order: %v", seed, err)
		}
		pos := make([]int, len(order))
		for i, id := range order {
			pos[id] = i
		}
		// Every edge, as gonum sees it, goes forward.
		for _, u := range order {
			for it := view.From(int64(u)); it.Next(); {
				if v := it.Node().ID(); pos[v] <= pos[u] {
					t.Fatalf("seed %d: edge %d->%d goes backward", seed, u, v)
				}
			}
		}
		// Each op is the smallest ID among those ready when it was taken.
		done := make([]bool, len(order))
		for _, id := range order {
			for cand := graph.OpID(0); cand < id; cand++ {
				if done[cand] {
					continue
				}
				ready := true
				for _, p := range adj.Preds(cand) {
					ready = ready && done[p]
				}
				if ready {
					t.Fatalf("seed %d: took %d while %d was ready", seed, id, cand)
				}
			}
			done[id] = true
		}

		// Closing a cycle (a producer waiting on its consumer): both gonum
		// and TopoOrder refuse.
		var u graph.OpID
		for _, id := range order {
			if len(adj.Preds(id)) > 0 {
				u = id
				break
			}
		}
		p := adj.Preds(u)[0]
		g.Ops[p].ControlDeps = append(g.Ops[p].ControlDeps, u)
		adj = g.BuildAdjacency()
		_, ours := g.TopoOrder(adj)
		_, theirs := topo.Sort(graph.AsDirected(g, adj))
		var ce *graph.CycleError
		if !errors.As(ours, &ce) || theirs == nil {
			t.Errorf("seed %d: cycle missed: ours %v, gonum %v", seed, ours, theirs)
		}
	}
}

func TestGrouping(t *testing.T) {
	g := build(t, [][2]any{{"a", []string{}}, {"b", []string{}}, {"c", []string{}}, {"d", []string{}}})
	g.Ops[1].Colocate, g.Ops[3].Colocate = "x", "x"
	gr := graph.ColocationGroups(g)
	if got := gr.Groups(); !reflect.DeepEqual(got, [][]graph.OpID{{0}, {1, 3}, {2}}) {
		t.Errorf("groups %v", got)
	}
	gr.Union(3, 2)
	if gr.Find(2) != 1 || gr.Union(1, 2) {
		t.Error("union-find representative is not the smallest member")
	}
}

func BenchmarkBuildAndSort(b *testing.B) {
	for _, n := range []int{10_000, 1_000_000} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			for i := 0; i < b.N; i++ {
				g := graph.New("chain", n, n)
				var prev graph.TensorID = -1
				for k := 0; k < n; k++ {
					out, _ := g.AddTensor(graph.Tensor{Name: fmt.Sprint("t", k), DType: graph.Float32})
					op := graph.Op{Name: fmt.Sprint("op", k), Outputs: []graph.TensorID{out}}
					if prev >= 0 {
						op.Inputs = []graph.TensorID{prev}
					}
					if _, err := g.AddOp(op); err != nil {
						b.Fatal(err)
					}
					prev = out
				}
				if _, err := g.TopoOrder(g.BuildAdjacency()); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(float64(b.Elapsed().Nanoseconds())/float64(b.N)/float64(n), "ns/op-node")
		})
	}
}

// TestDuplicateNames checks that a second tensor or op of one name is
// refused and leaves the first one found by name.
func TestDuplicateNames(t *testing.T) {
	g := graph.New("t", 0, 0)
	x, _ := g.AddTensor(graph.Tensor{Name: "x"})
	y, _ := g.AddTensor(graph.Tensor{Name: "y"})
	if _, err := g.AddTensor(graph.Tensor{Name: "x"}); err == nil || err.Error() != `tensor "x" is defined twice` {
		t.Errorf("second tensor x: %v", err)
	}
	if id, ok := g.TensorByName("x"); !ok || id != x || len(g.Tensors) != 2 {
		t.Errorf("x is tensor %d (%v) of %d, want %d of 2", id, ok, len(g.Tensors), x)
	}
	a, err := g.AddOp(graph.Op{Name: "a", Outputs: []graph.TensorID{x}})
	if err != nil {
		t.Fatal(err)
	}
	if _, err := g.AddOp(graph.Op{Name: "a", Inputs: []graph.TensorID{x}, Outputs: []graph.TensorID{y}}); err == nil || err.Error() != `op name "a" is used twice` {
		t.Errorf("second op a: %v", err)
	}
	if id, ok := g.OpByName("a"); !ok || id != a || len(g.Ops) != 1 {
		t.Errorf("a is op %d (%v) of %d, want %d of 1", id, ok, len(g.Ops), a)
	}
	if p, c := g.Tensors[y].Producer, g.Tensors[x].Consumers; p != graph.NoOp || len(c) != 0 {
		t.Errorf("the refused op was wired: y's producer %d, x's consumers %v", p, c)
	}
}

// TestBatch reads the batch from the first graph input whose shape is
// known, skipping unshaped and scalar ones.
func TestBatch(t *testing.T) {
	tests := []struct {
		name   string
		inputs []graph.Tensor
		want   int64
	}{
		{"no inputs", nil, 0},
		{"unshaped only", []graph.Tensor{{Name: "x"}}, 0},
		{"first shaped input", []graph.Tensor{{Name: "x", Shape: []int64{32, 3}, ShapeKnown: true}, {Name: "y", Shape: []int64{8}, ShapeKnown: true}}, 32},
		{"unshaped and scalar skipped", []graph.Tensor{{Name: "x"}, {Name: "s", ShapeKnown: true}, {Name: "y", Shape: []int64{4, 7}, ShapeKnown: true}}, 4},
	}
	for _, tt := range tests {
		g := graph.New("b", 0, len(tt.inputs))
		for _, in := range tt.inputs {
			in.Kind = graph.Input
			id, err := g.AddTensor(in)
			if err != nil {
				t.Fatal(err)
			}
			g.Inputs = append(g.Inputs, id)
		}
		if got := g.Batch(); got != tt.want {
			t.Errorf("%s: Batch() = %d, want %d", tt.name, got, tt.want)
		}
	}
}

func TestQuoteNames(t *testing.T) {
	g := graphtest.New("names").Input("x", 8).Op("a", 1, 1, "x").Op("b", 1, 1, "x").Op("c", 1, 1, "x").Op("d", 1, 1, "x").Op("e", 1, 1, "x").G
	for _, tc := range []struct {
		ops  []graph.OpID
		want string
	}{
		{nil, ""},
		{[]graph.OpID{1}, `"b"`},
		{[]graph.OpID{0, 1, 2}, `"a", "b", "c"`},
		{[]graph.OpID{4, 3, 2, 1, 0}, `"e", "d", "c", and 2 more`},
	} {
		if got := g.QuoteNames(tc.ops); got != tc.want {
			t.Errorf("QuoteNames(%v) = %q, want %q", tc.ops, got, tc.want)
		}
	}
}

// TestLongCycleMessage checks that a cycle of many ops is named by its
// first ops, its last and its length, on one short line.
func TestLongCycleMessage(t *testing.T) {
	for _, tc := range []struct {
		ops  []string
		want string
	}{
		{[]string{"a", "b"}, "the graph has a cycle: a -> b -> a; "},
		{[]string{"a", "b", "c", "d", "e", "f"}, "the graph has a cycle: a -> b -> c -> d -> e -> f -> a; "},
		{[]string{"a", "b", "c", "d", "e", "f", "g"}, "the graph has a cycle: a -> b -> c -> d -> e -> ... -> g -> a (7 ops in the cycle); "},
	} {
		if got := (&graph.CycleError{Ops: tc.ops}).Error(); !strings.HasPrefix(got, tc.want) {
			t.Errorf("%v: %q, want it to start %q", tc.ops, got, tc.want)
		}
	}
	ops := make([]string, 100000)
	for i := range ops {
		ops[i] = fmt.Sprintf("/layers/layer.%d/Identity", i)
	}
	msg := (&graph.CycleError{Ops: ops}).Error()
	if len(msg) > 400 || !strings.Contains(msg, "(100000 ops in the cycle)") || !strings.Contains(msg, ops[99999]+" -> "+ops[0]) {
		t.Errorf("a cycle of 100000 ops: %d bytes: %.300s", len(msg), msg)
	}
}
