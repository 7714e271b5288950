package train_test

import (
	"math"
	"reflect"
	"strings"
	"testing"

	"github.com/opplace/opplace/graph"
	"github.com/opplace/opplace/graph/graphtest"
	"github.com/opplace/opplace/train"
)

// names lists tensor names for IDs.
func names(g *graph.Graph, ids []graph.TensorID) []string {
	out := make([]string, len(ids))
	for i, id := range ids {
		out[i] = g.Tensors[id].Name
	}
	return out
}

func op(t *testing.T, g *graph.Graph, name string) *graph.Op {
	t.Helper()
	id, ok := g.OpByName(name)
	if !ok {
		t.Fatalf("no op %q", name)
	}
	return &g.Ops[id]
}

func TestBuildChain(t *testing.T) {
	// x -> a(w1) -> b(w2); the test builder's tensors are uint8, so make
	// them float32 for differentiation.
	b := graphtest.New("chain").Input("x", 100).Param("w1", 40).Param("w2", 60).
		Op("a", 1000, 80, "x", "w1").Op("b", 3000, 20, "a", "w2").Output("b")
	for i := range b.G.Tensors {
		b.G.Tensors[i].DType = graph.Float32
	}
	g, stats, err := train.Build(b.G, train.Options{Optimizer: train.Adam})
	if err != nil {
		t.Fatal(err)
	}
	if stats != (train.Stats{Forward: 2, Backward: 2, Update: 2, GradientBytes: 4 * (40 + 60), StateBytes: 2 * 4 * (40 + 60)}) {
		t.Errorf("stats = %+v", stats)
	}
	bg := op(t, g, "b/grad")
	if got, want := names(g, bg.Inputs), []string{"a", "w2", "b"}; !reflect.DeepEqual(got, want) {
		t.Errorf("b/grad reads %v, want %v", got, want)
	}
	if got, want := names(g, bg.Outputs), []string{"grad/b/grad/a", "grad/b/grad/w2"}; !reflect.DeepEqual(got, want) {
		t.Errorf("b/grad writes %v, want %v", got, want)
	}
	ag := op(t, g, "a/grad")
	// The gradient flowing back from b, then the saved input and weight;
	// x is a graph input, so no gradient is computed for it.
	if got, want := names(g, ag.Inputs), []string{"grad/b/grad/a", "x", "w1", "a"}; !reflect.DeepEqual(got, want) {
		t.Errorf("a/grad reads %v, want %v", got, want)
	}
	if got, want := names(g, ag.Outputs), []string{"grad/a/grad/w1"}; !reflect.DeepEqual(got, want) {
		t.Errorf("a/grad writes %v, want %v", got, want)
	}
	if ag.Work.FLOPs != 2000 || bg.Work.FLOPs != 6000 || ag.Phase != graph.Backward {
		t.Errorf("gradient work %d/%d phase %v", ag.Work.FLOPs, bg.Work.FLOPs, ag.Phase)
	}
	if a := op(t, g, "a"); a.Colocate != ag.Colocate || a.Colocate == "" || a.Colocate == op(t, g, "b").Colocate {
		t.Errorf("colocation: a %q, a/grad %q", a.Colocate, ag.Colocate)
	}
	up := op(t, g, "w1/adam")
	// weight, its gradient, two moment tensors of 40 float32 each.
	if got, want := names(g, up.Inputs), []string{"w1", "grad/a/grad/w1", "w1/adam_state0", "w1/adam_state1"}; !reflect.DeepEqual(got, want) {
		t.Errorf("update reads %v, want %v", got, want)
	}
	if up.Work.FLOPs != 10*40 || up.Phase != graph.Update || up.Colocate != op(t, g, "a").Colocate {
		t.Errorf("update %+v", up)
	}
	if st := g.Tensors[up.Inputs[2]]; st.Kind != graph.Parameter || st.Bytes() != 4*40 {
		t.Errorf("optimizer state %+v", st)
	}
	// The result is still a DAG, with backward after forward.
	adj := g.BuildAdjacency()
	order, err := g.TopoOrder(adj)
	if err != nil {
		t.Fatal(err)
	}
	pos := map[string]int{}
	for i, id := range order {
		pos[g.Ops[id].Name] = i
	}
	if !(pos["a"] < pos["b"] && pos["b"] < pos["b/grad"] && pos["b/grad"] < pos["a/grad"] && pos["a/grad"] < pos["w1/adam"]) {
		t.Errorf("order %v", pos)
	}
}

func TestBuildSkipsNonDifferentiable(t *testing.T) {
	// An integer shape computation feeding a float op gets no gradient,
	// and a shared activation collects one gradient per consumer.
	b := graphtest.New("branch").Input("x", 8).Param("w", 8).
		Op("shape", 0, 8, "x").Op("a", 100, 8, "x", "w").Op("b", 100, 8, "a", "shape").Op("c", 100, 8, "a").Output("b", "c")
	for i := range b.G.Tensors {
		b.G.Tensors[i].DType = graph.Float32
	}
	shape, _ := b.G.TensorByName("shape")
	b.G.Tensors[shape].DType = graph.Int64
	g, stats, err := train.Build(b.G, train.Options{})
	if err != nil {
		t.Fatal(err)
	}
	if stats.Backward != 3 || stats.Update != 1 {
		t.Errorf("stats %+v: want gradients for a, b, c only", stats)
	}
	if _, ok := g.OpByName("shape/grad"); ok {
		t.Error("an integer op got a gradient")
	}
	// Backward runs in reverse topological order: c's gradient comes first.
	if got := names(g, op(t, g, "a/grad").Inputs)[:2]; !reflect.DeepEqual(got, []string{"grad/c/grad/a", "grad/b/grad/a"}) {
		t.Errorf("a/grad gradient inputs %v", got)
	}
}

func TestParseOptimizer(t *testing.T) {
	for _, name := range []string{"sgd", "momentum", "Adam"} {
		if _, err := train.ParseOptimizer(name); err != nil {
			t.Error(err)
		}
	}
	if _, err := train.ParseOptimizer("lion"); err == nil {
		t.Error("unknown optimizer accepted")
	}
}

// TestBuildWorkBounds checks that gradient work never wraps: a factor or
// forward work whose product reaches 2^62 is an error naming the op, a
// step whose work sums past int64 builds (its totals are float64), and a
// factor that is not a positive number is refused.
func TestBuildWorkBounds(t *testing.T) {
	fwd := func(flops ...int64) *graph.Graph {
		b := graphtest.New("big").Input("x", 100).Param("w", 40).Op("a", flops[0], 80, "x", "w")
		if len(flops) > 1 {
			b.Op("b", flops[1], 80, "a", "w")
		}
		for i := range b.G.Tensors {
			b.G.Tensors[i].DType = graph.Float32
		}
		return b.G
	}
	for _, tc := range []struct {
		name   string
		g      *graph.Graph
		factor float64
		want   string // "" for no error
	}{
		{"fits", fwd(1<<59, 1<<59), 0, ""},
		{"gradient past int64", fwd(1 << 59), 16, `op "a": its gradient's FLOPs or MACs (576460752303423488 × 16) reach 2^62`},
		{"sum past int64", fwd(1<<60-1, 1<<60-1), 0, ""},
		{"NaN factor", fwd(1), math.NaN(), "the gradient cost factor NaN must be a positive number"},
		{"negative factor", fwd(1), -2, "the gradient cost factor -2 must be a positive number"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g, _, err := train.Build(tc.g, train.Options{Factor: tc.factor})
			switch {
			case tc.want == "" && err != nil:
				t.Fatalf("error %v", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Fatalf("error %v, want one containing %q", err, tc.want)
			case err == nil:
				for i := range g.Ops {
					if w := g.Ops[i].Work; w.FLOPs < 0 || w.MACs < 0 {
						t.Errorf("op %s: negative work %+v", g.Ops[i].Name, w)
					}
				}
			}
		})
	}
}
