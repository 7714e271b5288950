package partition

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/opplace/opplace/graph"
	"github.com/opplace/opplace/graph/graphtest"
)

// sourceDAG is randomDAG with pure sources shaped like the weights an
// ONNX export feeds through Identity ops: each of the first ops but one
// gets, with some chance, a source of no FLOPs holding a parameter read
// only by that op, with an update op (of 0.1 to 10 MFLOP) in its unit
// when training. Its output (10 kB to 100 MB) makes receiving it cost
// from far less to far more than updating it.
func sourceDAG(rng *rand.Rand, n int, training bool) *graph.Graph {
	core := randomDAG(rng, n, 0)
	var ops []fwdOp
	var srcs []string
	for j, o := range core {
		if j > 0 && rng.Float64() < 0.6 {
			s := fwdOp{name: fmt.Sprintf("src%d", j), out: int64(1e4 * math.Pow(10, 4*rng.Float64())),
				param: int64(1e4 * math.Pow(10, 3*rng.Float64())), inputs: []string{"x"}}
			ops = append(ops, s)
			srcs = append(srcs, s.name)
			o.inputs = append(slices.Clone(o.inputs), s.name)
		}
		ops = append(ops, o)
	}
	g := buildGraph(ops, training)
	if training {
		b := &graphtest.Builder{G: g}
		for _, s := range srcs {
			b.Op(s+"/adam", int64(1e5*math.Pow(10, 2*rng.Float64())), 1, s+".w")
			op := &g.Ops[len(g.Ops)-1]
			op.Phase, op.Colocate = graph.Update, s
		}
	}
	return g
}

// TestSourceBoundAgainstBruteForce: on random DAGs with pure sources,
// the bound that charges each source to its consumer's stage is at most
// the optimum over every split of the unit graph (brute force), and
// sourceBound, started from the pipedream plan, never returns a plan
// worse than that plan or better than the optimum, and when it claims
// optimality the plan is the optimum.
func TestSourceBoundAgainstBruteForce(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 13))
	c := propertyCluster()
	const trials = 80
	withSources, proven, improved := 0, 0, 0
	defer func() {
		if withSources < 50 || proven < 20 || improved < 10 {
			t.Errorf("only %d of %d trials with pure sources, %d proven", withSources, trials, proven)
		}
		t.Logf("%d of %d trials with pure sources, %d proven optimal, %d improved on pipedream", withSources, trials, proven, improved)
	}()
	for trial := 0; trial < trials; trial++ {
		n := 2 + rng.IntN(5)
		training := rng.IntN(4) > 0
		opts := Options{MicroBatches: []int{1, 2, 4}[rng.IntN(3)], Schedule: []Schedule{OneFOneB, GPipe}[rng.IntN(2)],
			Objective: []Objective{Throughput, Latency}[rng.IntN(4)/3]}
		g := sourceDAG(rng, n, training)
		t.Run(fmt.Sprintf("trial%d/n%d/train=%v/%s/%s/M%d", trial, n, training, opts.Schedule, opts.Objective, opts.MicroBatches), func(t *testing.T) {
			p := newTestProblem(t, g, c, opts)
			src := pureSources(p.u, p.m)
			if !slices.Contains(src, true) {
				return
			}
			withSources++
			M := opts.MicroBatches
			il, err := idealLattice(p.u, p.m, 1<<20)
			if err != nil {
				t.Fatal(err)
			}
			want := bruteForce(p, il, M)
			cb := newCoreBound(p.u, p.m, src)
			cl, err := idealLattice(cb.u, cb.m, 1<<20)
			if err != nil {
				t.Fatal(err)
			}
			if lb := bruteForce(p, cl, M); lb > want*(1+1e-9) {
				t.Fatalf("bound %v s above the optimum %v s", lb, want)
			}
			pr, _ := New("pipedream")
			pl, err := pr.Partition(context.Background(), p)
			if err != nil {
				return // one order's prefixes may not fit in memory where other splits do
			}
			start := pl.value
			info := &ExactInfo{}
			ok, lb, err := p.sourceBound(context.Background(), pl, info, time.Time{})
			if err != nil {
				t.Fatal(err)
			}
			if pl.value > start*(1+1e-12) || pl.value < want*(1-1e-9) {
				t.Errorf("plan %v s from pipedream's %v s, optimum %v s", pl.value, start, want)
			}
			if pl.value < start*(1-1e-9) {
				improved++
			}
			if lb > want*(1+1e-9) {
				t.Errorf("lower bound %v s above the optimum %v s", lb, want)
			}
			if ok {
				proven++
				if !near(pl.value, want) || !info.Optimal {
					t.Errorf("claims optimality at %v s (%+v), brute force %v s", pl.value, info, want)
				}
			}
		})
	}
}
