package strategy_test

import (
	"context"
	"fmt"
	"slices"
	"strings"
	"testing"

	"github.com/opplace/opplace/cost"
	"github.com/opplace/opplace/graph"
	"github.com/opplace/opplace/graph/graphtest"
	"github.com/opplace/opplace/placer"
	"github.com/opplace/opplace/sim"
	"github.com/opplace/opplace/strategy"
	"github.com/opplace/opplace/train"
)

// rcProblem is the SGD training step of 4 modules "/l<i>/", each a
// layer a (on a small weight) writing a 32 MiB activation that layer b
// reads, writing the module's 1 MiB output, on 2 devices of the given
// memory: the inner activations dominate the peak.
func rcProblem(t *testing.T, memory int64) *strategy.Problem {
	t.Helper()
	b := graphtest.New("modules").Input("x", 1<<20)
	prev := "x"
	for i := 0; i < 4; i++ {
		w := fmt.Sprintf("w%d", i)
		a, o := fmt.Sprintf("/l%d/a", i), fmt.Sprintf("/l%d/b", i)
		b.Param(w, 1024).Op(a, 1e9, 32<<20, prev, w).Op(o, 1e9, 1<<20, a)
		prev = o
	}
	b.Output(prev)
	for i := range b.G.Tensors {
		b.G.Tensors[i].DType = graph.Float32
		b.G.Tensors[i].Shape = []int64{b.G.Tensors[i].Shape[0] / 4}
	}
	g, _, err := train.Build(b.G, train.Options{Optimizer: train.SGD})
	if err != nil {
		t.Fatal(err)
	}
	c := graphtest.Cluster(1e10, 1e-6, graphtest.Device{FLOPS: 1e12, Memory: memory}, graphtest.Device{FLOPS: 1e12, Memory: memory})
	p, err := placer.NewProblem(g, cost.NewTable(g, c, cost.Roofline{ComputeEfficiency: 1, MemoryEfficiency: 1}))
	if err != nil {
		t.Fatal(err)
	}
	return strategy.NewProblem(p, 8)
}

// TestRecomputeVariants: with memory between the peaks of data
// parallelism at its most micro-batches (4 per replica at batch 8) with
// and without recomputation, dp under auto offers recomputing variants of
// the plans that do not fit and the judge keeps one; under none it
// finds no plan that fits; under all every plan recomputes. With memory
// to spare auto keeps the plain plan, which is faster.
func TestRecomputeVariants(t *testing.T) {
	big := rcProblem(t, 1<<40)
	peak := func(rc bool) int64 {
		pl := &sim.Plan{Placement: sim.Placement{Device: make([]int, len(big.Graph.Ops))}, MicroBatches: 4,
			Stages: []sim.Stage{{Replicas: [][]int{{0}, {1}}, Recompute: rc}}}
		res, err := big.Simulate(pl)
		if err != nil {
			t.Fatal(err)
		}
		return res.PeakMemory[0]
	}
	plain, rc := peak(false), peak(true)
	if 2*rc > plain {
		t.Fatalf("recomputation peaks at %d bytes, plain at %d: want at most half", rc, plain)
	}
	tight := rcProblem(t, (plain+rc)/2)
	run := func(p *strategy.Problem, mode string) strategy.Outcome {
		s, err := strategy.New("dp", strategy.Config{Recompute: mode})
		if err != nil {
			t.Fatal(err)
		}
		return strategy.Evaluate(context.Background(), p, "dp", s)
	}
	if o := run(tight, ""); o.Err != nil || !o.Fits || !o.Plan.Stages[0].Recompute {
		t.Errorf("auto: fits %v, recompute %v, err %v; want a recomputing plan that fits", o.Fits, o.Plan != nil && o.Plan.Stages[0].Recompute, o.Err)
	} else if !slices.ContainsFunc(o.Notes, func(n string) bool { return strings.Contains(n, "activations are recomputed") }) {
		t.Errorf("auto: notes %q, want one on recomputation", o.Notes)
	}
	if o := run(tight, strategy.RecomputeNone); o.Fits {
		t.Errorf("none: a plan fits, without recomputation")
	}
	if o := run(big, strategy.RecomputeAll); !o.Fits || !o.Plan.Stages[0].Recompute {
		t.Errorf("all: the plan kept does not recompute")
	}
	if o := run(big, ""); !o.Fits || o.Plan.Stages[0].Recompute {
		t.Errorf("auto with memory to spare: recompute %v; want the plain plan", o.Plan.Stages[0].Recompute)
	}
	for _, s := range []string{"", "auto", "none", "all"} {
		if _, err := strategy.ParseRecompute(s); err != nil {
			t.Errorf("%q: %v", s, err)
		}
	}
	if _, err := strategy.ParseRecompute("some"); err == nil {
		t.Error("some: no error")
	}
}
