package shard

import (
	"errors"
	"fmt"
	"strings"
	"testing"

	"github.com/opplace/opplace/graph"
	"github.com/opplace/opplace/sim"
	"github.com/opplace/opplace/train"
)

// flopModel is the tests' cost model: an op runs at 100 TFLOP/s, and a
// collective moves its ring share of the bytes over a link of bandwidth
// bytes per second (an all-reduce 2(t-1)/t of them, a reduce-scatter or
// all-gather (t-1)/t), as sim's ring model does without latency.
type flopModel struct {
	g         *graph.Graph
	t         int
	bandwidth float64
}

func (m flopModel) RunTime(op graph.OpID, share float64) float64 {
	return float64(m.g.Ops[op].Work.FLOPs) / 100e12 * share
}

func (m flopModel) Collective(kind sim.CollectiveKind, bytes int64) float64 {
	f := float64(m.t-1) / float64(m.t)
	if kind == sim.AllReduce {
		f *= 2
	}
	return f * float64(bytes) / m.bandwidth
}

// builder makes small shaped graphs.
type builder struct {
	tb testing.TB
	g  *graph.Graph
}

func newBuilder(tb testing.TB) *builder { return &builder{tb: tb, g: graph.New("test", 0, 0)} }

func (b *builder) tensor(name string, kind graph.TensorKind, shape ...int64) {
	b.tb.Helper()
	if _, err := b.g.AddTensor(graph.Tensor{Name: name, DType: graph.Float32, Shape: shape, ShapeKnown: true, Kind: kind}); err != nil {
		b.tb.Fatal(err)
	}
}

func (b *builder) input(name string, shape ...int64) *builder {
	b.tensor(name, graph.Input, shape...)
	id, _ := b.g.TensorByName(name)
	b.g.Inputs = append(b.g.Inputs, id)
	return b
}

func (b *builder) param(name string, shape ...int64) *builder {
	b.tensor(name, graph.Parameter, shape...)
	return b
}

// op adds an op writing out (of shape) from ins, with flops.
func (b *builder) op(name, typ string, flops int64, out string, shape []int64, ins ...string) *builder {
	b.tb.Helper()
	b.tensor(out, graph.Activation, shape...)
	o, _ := b.g.TensorByName(out)
	op := graph.Op{Name: name, Type: typ, Outputs: []graph.TensorID{o}, Work: graph.Work{FLOPs: flops}}
	for _, in := range ins {
		id, ok := b.g.TensorByName(in)
		if !ok {
			b.tb.Fatalf("no tensor %q", in)
		}
		op.Inputs = append(op.Inputs, id)
	}
	if _, err := b.g.AddOp(op); err != nil {
		b.tb.Fatal(err)
	}
	return b
}

func (b *builder) output(name string) *builder {
	id, _ := b.g.TensorByName(name)
	b.g.Outputs = append(b.g.Outputs, id)
	return b
}

// mlp adds a 2-layer MLP (d -> h -> d) named prefix reading x of
// n rows.
func (b *builder) mlp(prefix, x string, n, d, h int64) *builder {
	return b.param(prefix+"w1", d, h).param(prefix+"b1", h).param(prefix+"w2", h, d).param(prefix+"b2", d).
		op(prefix+"fc1", "MatMul", 2*n*d*h, prefix+"h1", []int64{n, h}, x, prefix+"w1").
		op(prefix+"bias1", "Add", n*h, prefix+"a1", []int64{n, h}, prefix+"h1", prefix+"b1").
		op(prefix+"relu", "Relu", n*h, prefix+"r", []int64{n, h}, prefix+"a1").
		op(prefix+"fc2", "MatMul", 2*n*h*d, prefix+"h2", []int64{n, d}, prefix+"r", prefix+"w2").
		op(prefix+"bias2", "Add", n*d, prefix+"y", []int64{n, d}, prefix+"h2", prefix+"b2").
		output(prefix + "y")
}

func step(tb testing.TB, g *graph.Graph) *graph.Graph {
	tb.Helper()
	s, _, err := train.Build(g, train.Options{Optimizer: train.Adam})
	if err != nil {
		tb.Fatal(err)
	}
	return s
}

func opID(tb testing.TB, g *graph.Graph, name string) graph.OpID {
	tb.Helper()
	id, ok := g.OpByName(name)
	if !ok {
		tb.Fatalf("no op %q", name)
	}
	return id
}

// syncs counts the collectives of kind on ops, and on their gradient ops.
func syncs(g *graph.Graph, sol *Solution, ops []graph.OpID, kind sim.CollectiveKind) (fwd, bwd int) {
	for _, op := range ops {
		for _, s := range sol.Split.Syncs[op] {
			if s.Kind == kind {
				fwd++
			}
		}
		if gid, ok := g.OpByName(g.Ops[op].Name + "/grad"); ok {
			for _, s := range sol.Split.Syncs[gid] {
				if s.Kind == kind {
					bwd++
				}
			}
		}
	}
	return fwd, bwd
}

func allOps(g *graph.Graph) []graph.OpID {
	var ops []graph.OpID
	for i := range g.Ops {
		if g.Ops[i].Phase == graph.Forward {
			ops = append(ops, graph.OpID(i))
		}
	}
	return ops
}

func TestMLPColumnThenRow(t *testing.T) {
	for _, tc := range []struct {
		t         int
		bandwidth float64
		want      map[string]string
		allReduce int // forward and backward each
	}{
		{2, 100e9, map[string]string{"fc1": "column", "bias1": "split:1", "relu": "split:1", "fc2": "row", "bias2": "replicated"}, 1},
		{4, 100e9, map[string]string{"fc1": "column", "bias1": "split:1", "relu": "split:1", "fc2": "row", "bias2": "replicated"}, 1},
		{8, 100e9, map[string]string{"fc1": "column", "fc2": "row"}, 1},
		// A link 10,000 times slower: every collective costs more than
		// the compute it saves, so the same search keeps all replicated.
		{4, 10e6, map[string]string{"fc1": "replicated", "bias1": "replicated", "relu": "replicated", "fc2": "replicated", "bias2": "replicated"}, 0},
	} {
		// x is a softmax (which normalises the one axis tensor
		// parallelism could split) of an input scaled by a trained
		// vector, so it is replicated and its gradient flows.
		g := step(t, newBuilder(t).input("in", 256, 1024).param("s", 1024).
			op("scale", "Mul", 256*1024, "u", []int64{256, 1024}, "in", "s").
			op("norm", "Softmax", 5*256*1024, "x", []int64{256, 1024}, "u").
			mlp("", "x", 256, 1024, 4096).g)
		m := flopModel{g: g, t: tc.t, bandwidth: tc.bandwidth}
		sol, err := Solve(g, tc.t, m, Options{})
		if err != nil {
			t.Fatal(err)
		}
		for op, want := range tc.want {
			if got := sol.Choice[opID(t, g, op)]; got != want {
				t.Errorf("t=%d bw=%g: %s is %q, want %q", tc.t, tc.bandwidth, op, got, want)
			}
		}
		fwd, bwd := syncs(g, sol, allOps(g), sim.AllReduce)
		if fwd != tc.allReduce || bwd != tc.allReduce {
			t.Errorf("t=%d bw=%g: %d forward and %d backward all-reduces, want %d each", tc.t, tc.bandwidth, fwd, bwd, tc.allReduce)
		}
		if tc.allReduce == 0 {
			for op, s := range sol.Split.Split {
				if s != 0 {
					t.Errorf("slow link: op %q has share %v", g.Ops[op].Name, s)
				}
			}
			continue
		}
		// The forward all-reduce is fc2's output, the backward one the
		// gradient fc1's gradient op writes for x.
		fc2, fc1g := opID(t, g, "fc2"), opID(t, g, "fc1/grad")
		if s := sol.Split.Syncs[fc2]; len(s) != 1 || s[0].Tensor != g.Ops[fc2].Outputs[0] || s[0].Bytes != 256*1024*4 {
			t.Errorf("t=%d: fc2 syncs %+v, want one all-reduce of h2 (1 MiB)", tc.t, s)
		}
		if s := sol.Split.Syncs[fc1g]; len(s) != 1 || !strings.HasSuffix(g.Tensors[s[0].Tensor].Name, "/x") {
			t.Errorf("t=%d: fc1/grad syncs %+v, want one all-reduce of x's gradient", tc.t, s)
		}
		for _, name := range []string{"fc1", "fc2", "fc1/grad", "fc2/grad", "w1/adam", "w2/adam", "b1/adam"} {
			if s := sol.Split.Split[opID(t, g, name)]; s != 1 {
				t.Errorf("t=%d: %s has share %v, want 1", tc.t, name, s)
			}
		}
		if s := sol.Split.Split[opID(t, g, "b2/adam")]; s != 0 {
			t.Errorf("t=%d: b2's update has share %v, want 0 (the row bias is replicated)", tc.t, s)
		}
		for _, name := range []string{"w1", "b1", "w2", "h1", "r", "w1/adam_state0", "w2/adam_state1", "grad/fc1/grad/w1", "grad/fc2/grad/w2"} {
			id, ok := g.TensorByName(name)
			if !ok || !sol.Split.Divided[id] {
				t.Errorf("t=%d: tensor %q is not divided", tc.t, name)
			}
		}
		for _, name := range []string{"x", "s", "b2", "h2", "y", "grad/fc1/grad/x"} {
			id, _ := g.TensorByName(name)
			if sol.Split.Divided[id] {
				t.Errorf("t=%d: tensor %q is divided", tc.t, name)
			}
		}
		if got := sol.Choice[opID(t, g, "fc1/grad")]; got != "grad:column" {
			t.Errorf("t=%d: fc1/grad choice %q", tc.t, got)
		}
		// The estimate beats running everything replicated.
		whole := 0.0
		for i := range g.Ops {
			whole += m.RunTime(graph.OpID(i), 1)
		}
		if !(sol.Estimate < whole) {
			t.Errorf("t=%d: estimate %g not below the replicated step %g", tc.t, sol.Estimate, whole)
		}
	}
}

// TestIndivisibleStaysReplicated: a second MLP whose dimensions (1002,
// 4100) do not divide 8 ways stays replicated beside one that splits.
func TestIndivisibleStaysReplicated(t *testing.T) {
	b := newBuilder(t).input("x", 256, 1024).input("z", 256, 1002)
	b.mlp("a/", "x", 256, 1024, 4096).mlp("b/", "z", 256, 1002, 4100)
	g := step(t, b.g)
	sol, err := Solve(g, 8, flopModel{g: g, t: 8, bandwidth: 100e9}, Options{})
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]string{"a/fc1": "column", "a/fc2": "row", "b/fc1": "replicated", "b/fc2": "replicated", "b/relu": "replicated"} {
		if got := sol.Choice[opID(t, g, name)]; got != want {
			t.Errorf("%s is %q, want %q", name, got, want)
		}
	}
	if w, _ := g.TensorByName("b/w1"); sol.Split.Divided[w] {
		t.Error("b/w1 is divided")
	}
}

func TestErrors(t *testing.T) {
	elementwise := newBuilder(t).input("x", 256, 1024).param("s", 1024).
		op("scale", "Mul", 256*1024, "y", []int64{256, 1024}, "x", "s").
		op("act", "Relu", 256*1024, "z", []int64{256, 1024}, "y").output("z").g
	indivisible := newBuilder(t).input("x", 256, 1002).mlp("", "x", 256, 1002, 4100).g
	mlp := newBuilder(t).input("x", 256, 1024).mlp("", "x", 256, 1024, 4096).g
	for _, tc := range []struct {
		name          string
		g             *graph.Graph
		t             int
		notApplicable bool
	}{
		{"no weight-bearing op", elementwise, 2, true},
		{"dimensions do not divide", indivisible, 8, true},
		{"one device", mlp, 1, false},
		{"no devices", mlp, 0, false},
	} {
		g := step(t, tc.g)
		_, err := Solve(g, tc.t, flopModel{g: g, t: max(tc.t, 2), bandwidth: 100e9}, Options{})
		if err == nil {
			t.Errorf("%s: no error", tc.name)
			continue
		}
		if errors.Is(err, ErrNotApplicable) != tc.notApplicable {
			t.Errorf("%s: error %v, not-applicable want %v", tc.name, err, tc.notApplicable)
		}
	}
}

func TestConversions(t *testing.T) {
	for _, tc := range []struct {
		from, to Layout
		kind     sim.CollectiveKind
		needed   bool
	}{
		{Partial, Replicated, sim.AllReduce, true},
		{Split(2), Replicated, sim.AllGather, true},
		{Partial, Split(1), sim.ReduceScatter, true},
		{Replicated, Split(1), "", false},
		{Split(1), Split(1), "", false},
		{Split(1), Split(2), sim.AllGather, true},
		{Split(1), anyLayout, "", false},
	} {
		kind, ok := conversion(tc.from, tc.to)
		if kind != tc.kind || ok != tc.needed {
			t.Errorf("%v -> %v: %q %v, want %q %v", tc.from, tc.to, kind, ok, tc.kind, tc.needed)
		}
	}
	if dual(Partial) != Replicated || dual(Split(3)) != Split(3) || dual(Replicated) != Replicated {
		t.Error("dual layouts wrong")
	}
}

func TestGroupLeads(t *testing.T) {
	for _, tc := range []struct {
		in, out []int64
		want    [][2]int
	}{
		{[]int64{8, 1024, 768}, []int64{8, 1024, 12, 64}, [][2]int{{0, 0}, {1, 1}, {2, 2}}},
		{[]int64{8, 1024, 12, 64}, []int64{8, 1024, 768}, [][2]int{{0, 0}, {1, 1}, {2, 2}}},
		{[]int64{8, 1, 768}, []int64{8, 768}, [][2]int{{0, 0}, {2, 1}}},
		// One group of 24: the leading dims' 1/t are one contiguous range.
		{[]int64{6, 4}, []int64{4, 6}, [][2]int{{0, 0}}},
	} {
		got := groupLeads(tc.in, tc.out)
		if len(got) != len(tc.want) {
			t.Errorf("%v -> %v: %v, want %v", tc.in, tc.out, got, tc.want)
			continue
		}
		for i := range got {
			if got[i] != tc.want[i] {
				t.Errorf("%v -> %v: %v, want %v", tc.in, tc.out, got, tc.want)
			}
		}
	}
}

// TestTokens: with token splits offered, an MLP over many tokens and
// small weights splits its tokens (every member keeps the weights whole
// and the backward pass all-reduces their gradients, no collective in
// the forward pass), while one over few tokens and large weights keeps
// Megatron's column then row: the search weighs the activations'
// collectives against the weights'. Without token splits both are
// column then row.
func TestTokens(t *testing.T) {
	for _, tc := range []struct {
		n, d, h int64
		tokens  bool
		fc      string // fc1's and fc2's choice
	}{
		{8192, 256, 2048, true, "tokens"},
		{8192, 256, 2048, false, ""},
		{256, 1024, 4096, true, ""},
	} {
		name := fmt.Sprintf("n=%d,d=%d,tokens=%v", tc.n, tc.d, tc.tokens)
		// Two sequences of n/2 tokens: the batch (axis 0) is data
		// parallelism's to split, the tokens (axis 1) the group's.
		n, d, h := tc.n, tc.d, tc.h
		g := step(t, newBuilder(t).input("in", 2, n/2, d).param("s", d).
			op("scale", "Mul", n*d, "u", []int64{2, n / 2, d}, "in", "s").
			op("norm", "Softmax", 5*n*d, "x", []int64{2, n / 2, d}, "u").
			param("w1", d, h).param("b1", h).param("w2", h, d).param("b2", d).
			op("fc1", "MatMul", 2*n*d*h, "h1", []int64{2, n / 2, h}, "x", "w1").
			op("bias1", "Add", n*h, "a1", []int64{2, n / 2, h}, "h1", "b1").
			op("relu", "Relu", n*h, "r", []int64{2, n / 2, h}, "a1").
			op("fc2", "MatMul", 2*n*h*d, "h2", []int64{2, n / 2, d}, "r", "w2").
			op("bias2", "Add", n*d, "y", []int64{2, n / 2, d}, "h2", "b2").
			output("y").g)
		sol, err := Solve(g, 4, flopModel{g: g, t: 4, bandwidth: 100e9}, Options{Tokens: tc.tokens})
		if err != nil {
			t.Fatal(err)
		}
		want := [2]string{"column", "row"}
		if tc.fc != "" {
			want = [2]string{tc.fc, tc.fc}
		}
		for i, op := range []string{"fc1", "fc2"} {
			if got := sol.Choice[opID(t, g, op)]; got != want[i] {
				t.Errorf("%s: %s is %q, want %q", name, op, got, want[i])
			}
		}
		if tc.fc != "tokens" {
			continue
		}
		// Forward, only the graph's output is gathered whole.
		fwd, _ := syncs(g, sol, allOps(g), sim.AllReduce)
		ag, _ := syncs(g, sol, allOps(g), sim.AllGather)
		if fwd != 0 || ag != 1 {
			t.Errorf("%s: %d forward all-reduces and %d all-gathers, want 0 and 1 (the output)", name, fwd, ag)
		}
		// Each weight's gradient is a partial sum, all-reduced.
		for _, w := range []string{"w1", "w2"} {
			x, _ := g.TensorByName(w)
			var found bool
			for op := range g.Ops {
				for _, y := range sol.Split.Syncs[op] {
					found = found || (y.Kind == sim.AllReduce && strings.HasSuffix(g.Tensors[y.Tensor].Name, "/"+w) && y.Bytes == g.Tensors[x].Bytes())
				}
			}
			if !found {
				t.Errorf("%s: no all-reduce of %s's gradient", name, w)
			}
		}
	}
}

// TestTokenSplitsOffered checks Solution.TokenSplits, which tells
// callers whether a solve with Options.Tokens would be the same program
// again: it is whether some matmul's rows (a sequence's tokens) divide
// among the group, whatever Tokens is set to.
func TestTokenSplitsOffered(t *testing.T) {
	for _, tc := range []struct {
		rows   int64 // per sequence
		tokens bool
		want   bool
	}{
		{8, false, true}, {8, true, true}, {6, false, false}, {6, true, true},
	} {
		n, d, h := 2*tc.rows, int64(8), int64(16)
		g := step(t, newBuilder(t).input("x", 2, tc.rows, d).
			param("w1", d, h).param("w2", h, d).
			op("fc1", "MatMul", 2*n*d*h, "h1", []int64{2, tc.rows, h}, "x", "w1").
			op("relu", "Relu", n*h, "r", []int64{2, tc.rows, h}, "h1").
			op("fc2", "MatMul", 2*n*h*d, "y", []int64{2, tc.rows, d}, "r", "w2").
			output("y").g)
		sol, err := Solve(g, 4, flopModel{g: g, t: 4, bandwidth: 100e9}, Options{Tokens: tc.tokens})
		if err != nil {
			t.Fatal(err)
		}
		if sol.TokenSplits != tc.want {
			t.Errorf("%d rows, tokens %v: TokenSplits %v, want %v", tc.rows, tc.tokens, sol.TokenSplits, tc.want)
		}
	}
}
