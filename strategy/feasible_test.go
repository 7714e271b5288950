package strategy_test

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"
	"testing"
	"time"

	"github.com/opplace/opplace/cost"
	"github.com/opplace/opplace/graph"
	"github.com/opplace/opplace/graph/graphtest"
	"github.com/opplace/opplace/placer"
	"github.com/opplace/opplace/sim"
	"github.com/opplace/opplace/strategy"
	"github.com/opplace/opplace/train"
)

// memoryBound is the space's memory bound of p, the one a proof that
// nothing fits rests on.
func memoryBound(p *strategy.Problem) *placer.InfeasibleError {
	return placer.InfeasibleAt(p.Problem, "", p.Finest())
}

// checkMemoryBound fails when a simulated plan holds less than the
// space's memory bound allows: on its fullest device less than the
// largest op's working set, or on all its devices together less than the
// parameters once plus the most any op adds. Such a plan would beat a
// "proof" that nothing fits.
func checkMemoryBound(t *testing.T, what string, e *placer.InfeasibleError, res *sim.Result) {
	t.Helper()
	var most, sum int64
	for _, b := range res.PeakMemory {
		most, sum = max(most, b), sum+b
	}
	if most < e.LargestOpBytes {
		t.Errorf("%s: peaks at %d bytes, below op %q's working set at the finest split, %d bytes (%s)", what, most, e.LargestOp, e.LargestOpBytes, e.At)
	}
	if sum < e.Need {
		t.Errorf("%s: its devices' peaks sum to %d bytes, below the bound %d bytes (%s)", what, sum, e.Need, e.At)
	}
}

// proposals runs every strategy of auto (ilp with short limits) and
// returns every plan each proposes, simulated, with its name.
func proposals(t *testing.T, p *strategy.Problem) (names []string, results []*sim.Result) {
	t.Helper()
	cfg := shortConfig()
	for _, name := range strategy.AutoStrategies {
		s, err := strategy.New(name, cfg)
		if err != nil {
			t.Fatal(err)
		}
		props, err := s.Propose(context.Background(), p)
		if err != nil {
			continue
		}
		for i, pr := range props {
			res := pr.Sim
			if res == nil {
				if res, err = p.Simulate(pr.Plan); err != nil {
					continue
				}
			}
			names = append(names, fmt.Sprintf("%s proposal %d (%s)", name, i, shapeOf(pr.Plan)))
			results = append(results, res)
		}
	}
	return names, results
}

// shortConfig keeps the solvers (exact, ilp, the local search) short.
func shortConfig() strategy.Config {
	var cfg strategy.Config
	cfg.Pipeline.TimeLimit = 200 * time.Millisecond
	cfg.Placer.TimeLimit = 200 * time.Millisecond
	cfg.Placer.RefineWork = 50_000
	return cfg
}

// shapeOf says a plan's stages, replicas and micro-batches, for messages.
func shapeOf(pl *sim.Plan) string {
	if pl == nil {
		return "no plan"
	}
	var reps []int
	for _, st := range pl.Stages {
		reps = append(reps, len(st.Replicas)*max(1, st.Tensor))
	}
	return fmt.Sprintf("%d stages, devices per stage %v, %d micro-batches", max(1, len(pl.Stages)), reps, max(1, pl.MicroBatches))
}

// randomStep is a random training step (the test graphs' own backward
// pass, or train.Build's with Adam's state, which ZeRO shards) or
// forward graph.
func randomStep(t *testing.T, r *rand.Rand, seed uint64) *graph.Graph {
	t.Helper()
	switch seed % 3 {
	case 0:
		return graphtest.RandomDAG(r, 5+r.IntN(10), true).G
	case 1:
		b := graphtest.RandomDAG(r, 5+r.IntN(10), false)
		b.Output(fmt.Sprint("f", len(b.G.Ops)-1))
		for i := range b.G.Tensors {
			b.G.Tensors[i].DType = graph.Float32 // trainable: float tensors
			b.G.Tensors[i].Shape = []int64{max(1, b.G.Tensors[i].Shape[0]/4)}
		}
		g, _, err := train.Build(b.G, train.Options{Optimizer: train.Adam})
		if err != nil {
			t.Fatal(err)
		}
		return g
	}
	return graphtest.RandomDAG(r, 5+r.IntN(10), false).G
}

// feasibleProblem is g on nd like devices of the given memory at batch.
func feasibleProblem(t *testing.T, g *graph.Graph, nd int, memory int64, batch int64) *strategy.Problem {
	t.Helper()
	devs := make([]graphtest.Device, nd)
	for i := range devs {
		devs[i] = graphtest.Device{FLOPS: 1e12, Memory: memory}
	}
	c := graphtest.Cluster(1e10, 1e-6, devs...)
	p, err := placer.NewProblem(g, cost.NewTable(g, c, cost.Roofline{ComputeEfficiency: 1, MemoryEfficiency: 1}))
	if err != nil {
		t.Fatal(err)
	}
	return strategy.NewProblem(p, batch)
}

// TestMemoryBoundHoldsForEveryPlan is the property behind "the model
// does not fit the cluster": on random training steps and forward graphs
// at random batches, on one to four devices whose memory is drawn around
// the space's memory bound, no plan any strategy of auto proposes holds
// less than the bound (its fullest device at least the largest op's
// working set at the finest split, its devices together at least the
// parameters once plus the most any op adds), so where the bound proves
// that nothing fits, no plan fits, auto fails with that proof, and where
// auto finds a plan, the bound proves nothing.
func TestMemoryBoundHoldsForEveryPlan(t *testing.T) {
	var proved, fitted, plans, unsplit int
	for seed := uint64(0); seed < 36; seed++ {
		r := rand.New(rand.NewPCG(seed, 31))
		g := randomStep(t, r, seed)
		nd := 1 + r.IntN(4)
		batch := int64(1 + r.IntN(8))
		// The bound does not depend on the memory: take it on roomy
		// devices, then draw the memory around it.
		e := memoryBound(feasibleProblem(t, g, nd, 1<<50, batch))
		if whole := placer.Infeasible(feasibleProblem(t, g, nd, 1<<50, batch).Problem, ""); whole.LargestOpBytes > e.LargestOpBytes {
			unsplit++ // the placements' bound, at the whole batch, is above the space's
		}
		per := max(e.LargestOpBytes, (e.Need+int64(nd)-1)/int64(nd))
		memory := int64(float64(per) * (0.8 + 2.4*r.Float64()))
		p := feasibleProblem(t, g, nd, memory, batch)
		e = memoryBound(p)
		names, results := proposals(t, p)
		for i, res := range results {
			plans++
			what := fmt.Sprintf("seed %d (%d devices of %d bytes, batch %d): %s", seed, nd, memory, batch, names[i])
			checkMemoryBound(t, what, e, res)
			if p.Fits(res) && e.Proved {
				t.Errorf("%s fits, but the bound proves nothing fits: %v", what, e)
			}
		}
		_, best, err := strategy.Search(context.Background(), p, shortConfig(), nil)
		var inf *placer.InfeasibleError
		switch {
		case best >= 0:
			fitted++
			if e.Proved {
				t.Errorf("seed %d: auto found a plan, but the bound proves nothing fits: %v", seed, e)
			}
		case errors.As(err, &inf):
			if inf.Proved != e.Proved {
				t.Errorf("seed %d: auto's failure says proved %v, the space's bound %v: %v", seed, inf.Proved, e.Proved, err)
			}
			if inf.Proved {
				proved++
			}
		default:
			t.Errorf("seed %d: auto failed without an infeasible error: %v", seed, err)
		}
	}
	t.Logf("%d plans checked; auto fitted %d problems, %d proved infeasible; %d where the whole-batch op is larger", plans, fitted, proved, unsplit)
	if fitted == 0 || proved == 0 || unsplit == 0 {
		t.Errorf("the draw does not exercise the bound: %d fitted, %d proved, %d split", fitted, proved, unsplit)
	}
}

// TestInfeasibleProofOnlyForTheSpace: a placer's failure, whose bound
// holds for placements (the whole batch on each op), is not reported as
// a proof when a plan that splits the batch could fit; where the
// parameters alone overflow the cluster, it is.
func TestInfeasibleProofOnlyForTheSpace(t *testing.T) {
	// An op writes 64 MiB of activations at batch 8, which the next reads;
	// each device holds 40 MiB and the parameters are small: only
	// micro-batches fit.
	b := graphtest.New("big").Input("x", 1<<10).Param("w", 1<<10).Op("f", 1e9, 64<<20, "x", "w").Op("g", 1e6, 1<<10, "f").Output("g")
	fits := feasibleProblem(t, b.G, 2, 40<<20, 8)
	for _, tc := range []struct {
		name   string
		p      *strategy.Problem
		proved bool
	}{
		{"micro-batches fit", fits, false},
		{"parameters overflow", problem(t, 4, 256<<20, 2, 300<<20), true},
	} {
		t.Run(tc.name, func(t *testing.T) {
			whole := placer.Infeasible(tc.p.Problem, "m-etf: stuck")
			err := strategy.Infeasible(tc.p, whole)
			var inf *placer.InfeasibleError
			if !errors.As(err, &inf) || inf.Detail != "m-etf: stuck" {
				t.Fatalf("got %v, want the placer's failure with its detail", err)
			}
			if !whole.Proved {
				t.Errorf("the placements' bound proves nothing: %v", whole)
			}
			if inf.Proved != tc.proved || inf.At == "" {
				t.Errorf("proved %v at %q, want %v at the finest split: %v", inf.Proved, inf.At, tc.proved, err)
			}
		})
	}
	_, best, err := strategy.Search(context.Background(), fits, strategy.Config{}, nil)
	if best < 0 {
		t.Errorf("no plan fits where micro-batches should: %v", err)
	}
}
