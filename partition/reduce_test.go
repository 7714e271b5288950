package partition

import (
	"encoding/json"
	"slices"
	"strings"
	"testing"
)

// TestReduce: a chain a → b → c with a tiny side op s (a → s → c) and a
// tiny source k feeding b. s joins a (its only predecessor, which has
// another successor); k joins b (its only successor). s's 1 kB output
// weighs more than the inputs only it reads (none: b reads a's output
// too), so the relaxation zeroes it; the relaxed costs drop s and k.
func TestReduce(t *testing.T) {
	ops := []fwdOp{
		{"a", 1, 1e6, 1e6, []string{"x"}},
		{"k", 1e-5, 1e3, 0, []string{"x"}},
		{"b", 1, 1e6, 1e6, []string{"a", "k"}},
		{"s", 1e-5, 1e3, 0, []string{"a"}},
		{"c", 1, 1e6, 1e6, []string{"b", "s"}},
	}
	p := newTestProblem(t, buildGraph(ops, true), testCluster(2, 1<<40, giga), Options{MicroBatches: 1})
	// k reads only the graph input, so it is a source of the unit DAG.
	r := reduce(p.u, p.m, 0.001)
	if r == nil {
		t.Fatal("nothing merged")
	}
	if r.real.n != 3 || r.merged != 2 {
		t.Fatalf("%d units after %d merges, want 3 after 2", r.real.n, r.merged)
	}
	name := func(v int32) []string {
		var out []string
		for _, op := range r.real.ops[v] {
			if n := p.Graph.Ops[op].Name; !strings.Contains(n, "_grad") {
				out = append(out, n)
			}
		}
		slices.Sort(out)
		return out
	}
	want := [][]string{{"a", "s"}, {"b", "k"}, {"c"}}
	for v := int32(0); v < 3; v++ {
		if got := name(v); !slices.Equal(got, want[v]) {
			t.Errorf("unit %d holds %v, want %v", v, got, want[v])
		}
	}
	// Forward + backward of a (1 + 2 GFLOP at 1 GFLOP/s): s is dropped
	// from the relaxed unit, kept in the real one.
	if got := r.relaxM.fwd[0] + r.relaxM.bwd[0]; got != 3 {
		t.Errorf("relaxed unit {a,s} costs %v s, want 3", got)
	}
	if got := r.m.fwd[0] + r.m.bwd[0]; got != 3+3e-5 {
		t.Errorf("real unit {a,s} costs %v s, want 3.00003", got)
	}
	var sBytes, relaxed int64 = -1, -1
	for i, ct := range r.real.tensors {
		if ct.producer == 0 && ct.bytes == 1e3 {
			sBytes, relaxed = ct.bytes, r.relaxU.tensors[i].bytes
		}
	}
	if sBytes != 1e3 || relaxed != 0 {
		t.Errorf("s's output crosses with %d bytes, relaxed %d; want 1000 and 0", sBytes, relaxed)
	}
	if reduce(p.u, p.m, -1) != nil {
		t.Error("a negative epsilon merged units")
	}
}

// TestExactDeterministic: two runs give byte-identical plans (with the
// reduction forced on by SearchIdeals 1).
func TestExactDeterministic(t *testing.T) {
	withoutUnitProof(t)
	ops := []fwdOp{{"a", 1, 1e6, 1e6, []string{"x"}}}
	for i := 0; i < 12; i++ {
		prev := ops[len(ops)-1].name
		side := prev + "_shape"
		ops = append(ops, fwdOp{side, 1e-5, 8, 0, []string{prev}},
			fwdOp{prev + "n", 1 + float64(i%3), 1e6, 1e6, []string{prev, side}})
	}
	var out [2][]byte
	for i := range out {
		p := newTestProblem(t, buildGraph(ops, true), testCluster(4, 1<<40, giga), Options{SearchIdeals: 1})
		pl := run(t, "exact", p)
		if pl.Exact == nil || pl.Exact.ReducedUnits >= pl.Exact.Units {
			t.Fatalf("side ops not merged: %+v", pl.Exact)
		}
		out[i], _ = json.Marshal(pl)
	}
	if string(out[0]) != string(out[1]) {
		t.Error("exact plans differ between runs")
	}
}

// withoutUnitProof turns off exact's search of the unit graph under the
// reduced optimum for the rest of the test, so the reduction and its
// certificate are what is checked.
func withoutUnitProof(t *testing.T) {
	proveUnits = false
	t.Cleanup(func() { proveUnits = true })
}
