package strategy_test

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"slices"
	"testing"
	"time"

	"github.com/opplace/opplace/cluster"
	"github.com/opplace/opplace/cost"
	"github.com/opplace/opplace/graph"
	"github.com/opplace/opplace/graph/graphtest"
	"github.com/opplace/opplace/placer"
	"github.com/opplace/opplace/sim"
	"github.com/opplace/opplace/strategy"
)

// wideDAG is width independent chains of depth ops from one input, each
// op reading a parameter of its own (of bytes in proportion to its
// FLOPs), joined by a last op: work, not the critical path, bounds its
// step, and the LP's memory rows bite.
func wideDAG(r *rand.Rand, width, depth int) *graphtest.Builder {
	b := graphtest.New("wide").Input("x", 1<<16)
	spread := func(lo, hi float64) int64 { return int64(lo * math.Pow(hi/lo, r.Float64())) }
	var ends []string
	for i := 0; i < width; i++ {
		prev := "x"
		for j := 0; j < depth; j++ {
			w, name := fmt.Sprintf("w%d_%d", i, j), fmt.Sprintf("c%d_%d", i, j)
			flops := spread(1e6, 1e7)
			b.Param(w, flops/16)
			b.Op(name, flops, spread(1<<12, 1<<18), prev, w)
			prev = name
		}
		ends = append(ends, prev)
	}
	b.Op("join", 1e4, 4, ends...)
	return b
}

// residentBytes sums the graph's parameters.
func residentBytes(g *graph.Graph) int64 {
	var s int64
	for _, t := range g.Tensors {
		if t.Kind.IsResident() {
			s += t.Bytes()
		}
	}
	return s
}

// heavyParams makes every parameter 256 times larger, so parameters, not
// activations, decide what fits.
func heavyParams(b *graphtest.Builder) *graphtest.Builder {
	for i := range b.G.Tensors {
		if t := &b.G.Tensors[i]; t.Kind == graph.Parameter {
			t.Shape[0] *= 256
		}
	}
	return b
}

// boundCluster is nd devices of one to three speeds on one host; the
// first device is fastest and, with tight, holds only part of the
// parameters, so any plan that fits splits them (the memory-forced and
// LP bounds then bite).
func boundCluster(r *rand.Rand, nd int, resident int64, tight bool, lo float64) *cluster.Cluster {
	devs := make([]graphtest.Device, nd)
	for d := range devs {
		devs[d] = graphtest.Device{FLOPS: 1e9 * float64(1+r.IntN(3)), Memory: 1 << 40}
		if tight {
			devs[d].Memory = int64(float64(resident)*(lo+0.6*r.Float64())) + 32<<20
		}
	}
	if tight {
		devs[0].FLOPS = 8e9
		devs[0].Memory = int64(float64(resident)*(0.2+0.4*r.Float64())) + 32<<20
	}
	return graphtest.Cluster(1e9*float64(1+r.IntN(20)), 1e-6*float64(1+r.IntN(30)), devs...)
}

func boundProblem(t testing.TB, b *graphtest.Builder, c *cluster.Cluster, batch int64) *strategy.Problem {
	t.Helper()
	p, err := placer.NewProblem(b.G, cost.NewTable(b.G, c, cost.Roofline{ComputeEfficiency: 1, MemoryEfficiency: 1}))
	if err != nil {
		t.Fatal(err)
	}
	return strategy.NewProblem(p, batch)
}

// checkBound fails when a simulated plan of a family steps below the
// family's bound (the fitting parts counted only for a plan that fits),
// or below the whole space's.
func checkBound(t *testing.T, p *strategy.Problem, what, family string, res *sim.Result, fits bool) {
	t.Helper()
	for _, fam := range []string{family, ""} {
		b := strategy.SpaceBound(p, fam)
		if !fits {
			b = b.Unfitting()
		}
		if res.Step < b.Seconds()*(1-1e-9) {
			t.Errorf("%s (%s): step %.6g s below the %q bound %.6g s (%s): %+v", what, family, res.Step, fam, b.Seconds(), b.Kind(), b.Parts)
		}
	}
}

// TestBoundsHoldForEveryStrategy runs every strategy of auto (and the
// pipeline schedules) on random training steps and inference graphs, on
// clusters whose fast device holds only part of the parameters, and
// checks that no plan any of them produces steps below its family's
// bound: a bound above a real plan would prune it from auto.
func TestBoundsHoldForEveryStrategy(t *testing.T) {
	names := slices.Concat(strategy.AutoStrategies, []string{"pipeline:gpipe", "ilp"})
	var cfg strategy.Config
	cfg.Pipeline.TimeLimit = 300 * time.Millisecond
	cfg.Placer.TimeLimit = 300 * time.Millisecond
	cfg.Placer.RefineWork = 100_000
	beats := map[string]int{} // how often each bound beats the old one
	plans := 0
	for seed := uint64(0); seed < 40; seed++ {
		r := rand.New(rand.NewPCG(seed, 13))
		train := seed%3 != 2
		b := graphtest.RandomDAG(r, 6+r.IntN(10), train)
		if seed%6 == 5 {
			b = wideDAG(r, 6+r.IntN(6), 2+r.IntN(2))
		}
		tight := seed%4 != 3
		if tight {
			heavyParams(b)
		}
		c := boundCluster(r, 2+r.IntN(3), residentBytes(b.G), tight, 0.3)
		p := boundProblem(t, b, c, int64(1+r.IntN(8)))
		for _, part := range strategy.SpaceBound(p, strategy.FamilyPlacement).Parts {
			if part.Seconds > p.Bound.Seconds()*(1+1e-9) {
				beats[part.Kind]++
			}
		}
		for _, name := range names {
			s, err := strategy.New(name, cfg)
			if err != nil {
				t.Fatal(err)
			}
			o := strategy.Evaluate(context.Background(), p, name, s)
			if o.Solve > time.Second {
				t.Logf("seed %d: %s took %v", seed, name, o.Solve)
			}
			if o.Sim == nil {
				continue
			}
			plans++
			checkBound(t, p, fmt.Sprintf("seed %d %s", seed, name), o.Family, o.Sim, o.Fits)

		}
	}
	t.Logf("%d plans checked; placement bounds above the old bound: %v", plans, beats)
	for _, kind := range []string{"memory-forced communication", "LP relaxation"} {
		if beats[kind] == 0 {
			t.Errorf("the %s bound never beat the old bound: the test does not exercise it", kind)
		}
	}
}

// TestBoundsBelowBruteForceOptimum enumerates every placement of tiny
// graphs (each op on any device, colocation ignored: the bound holds for
// them all) and checks the placement bound against the fastest that fits.
func TestBoundsBelowBruteForceOptimum(t *testing.T) {
	tighter := 0
	for seed := uint64(0); seed < 24; seed++ {
		r := rand.New(rand.NewPCG(seed, 29))
		var b *graphtest.Builder
		nd := 2
		if seed%2 == 0 {
			b = graphtest.RandomDAG(r, 3, true) // 10 ops on 2 devices
		} else {
			b = graphtest.RandomDAG(r, 6, false) // 6 ops on 3 devices
			nd = 3
		}
		c := boundCluster(r, nd, residentBytes(heavyParams(b).G), true, 0.5)
		p := boundProblem(t, b, c, 1)
		n := len(b.G.Ops)
		dev := make([]int, n)
		best := math.Inf(1)
		for {
			pl := sim.Placement{Device: slices.Clone(dev)}
			res, err := p.Simulate(&sim.Plan{Placement: pl})
			if err != nil {
				t.Fatal(err)
			}
			if p.Fits(res) {
				best = min(best, res.Step)
			}
			checkBound(t, p, fmt.Sprintf("seed %d placement %v", seed, dev), strategy.FamilyPlacement, res, p.Fits(res))
			i := 0
			for i < n && dev[i] == nd-1 {
				dev[i] = 0
				i++
			}
			if i == n {
				break
			}
			dev[i]++
		}
		bound := strategy.SpaceBound(p, strategy.FamilyPlacement)
		old := p.Bound.Seconds()
		if bound.Seconds() > old*(1+1e-9) && !math.IsInf(best, 1) {
			tighter++
		}
		t.Logf("seed %d: optimum %.4g s, bound %.4g s (%s), old bound %.4g s", seed, best, bound.Seconds(), bound.Kind(), old)
	}
	if tighter == 0 {
		t.Error("the new bounds never beat the old on these graphs: the test does not exercise them")
	}
}

// TestBoundParts: the largest part binds, an earlier one winning a tie
// within rounding; a plan that does not fit drops the parts that count
// memory.
func TestBoundParts(t *testing.T) {
	b := strategy.Bound{Parts: []strategy.BoundPart{
		{Kind: "work", Seconds: 2},
		{Kind: "critical path", Seconds: 1},
		{Kind: "memory-forced communication", Seconds: 2 * (1 + 1e-12), Fitting: true},
		{Kind: "LP relaxation", Seconds: 3, Fitting: true},
	}}
	if b.Seconds() != 3 || b.Kind() != "LP relaxation" {
		t.Errorf("bound %v (%s), want 3 (LP relaxation)", b.Seconds(), b.Kind())
	}
	u := b.Unfitting()
	if u.Seconds() != 2 || u.Kind() != "work" {
		t.Errorf("unfitting bound %v (%s), want 2 (work): a tie within rounding goes to the earlier part", u.Seconds(), u.Kind())
	}
	b.Parts[3].Seconds = 0
	if b.Kind() != "work" {
		t.Errorf("kind %s, want work: the memory-forced part exceeds it only by rounding", b.Kind())
	}
	if (strategy.Bound{}).Kind() != "" || (strategy.Bound{}).Seconds() != 0 {
		t.Error("an empty bound should be 0 with no kind")
	}
}

// TestAllReduceBound: data parallelism on training steps built by package
// train (whose weight gradients only the updates read) pays at least the
// gradient all-reduce bound, which grows with the parameters until it
// binds.
func TestAllReduceBound(t *testing.T) {
	bound := 0
	for _, paramBytes := range []int64{1 << 20, 64 << 20, 512 << 20} {
		for _, n := range []int{2, 4} {
			p := problem(t, 6, paramBytes, n, 1<<40)
			s, err := strategy.New("dp", strategy.Config{})
			if err != nil {
				t.Fatal(err)
			}
			o := strategy.Evaluate(context.Background(), p, "dp", s)
			if o.Sim == nil {
				t.Fatalf("dp: %v", o.Err)
			}
			b := strategy.SpaceBound(p, strategy.FamilyDataParallel)
			ar, _ := b.Part("gradient all-reduce")
			if ar.Seconds <= 0 {
				t.Fatalf("%d-byte parameters: no all-reduce bound (%s)", paramBytes, ar.Note)
			}
			checkBound(t, p, fmt.Sprintf("dp on %d devices, %d-byte parameters", n, paramBytes), o.Family, o.Sim, o.Fits)
			if b.Kind() == "gradient all-reduce" {
				bound++
			}
			t.Logf("%d devices, %d-byte parameters: step %.4g s, bound %.4g s (%s), all-reduce %.4g s", n, paramBytes, o.Sim.Step, b.Seconds(), b.Kind(), ar.Seconds)
		}
	}
	if bound == 0 {
		t.Error("the all-reduce bound never bound")
	}
}
