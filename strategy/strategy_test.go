package strategy_test

import (
	"context"
	"errors"
	"runtime"
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

// problem builds a training step of a chain of layers, each a 1 GFLOP op
// on a parameter of paramBytes, on n devices of the given memory.
func problem(t *testing.T, layers int, paramBytes int64, n int, memory int64) *strategy.Problem {
	t.Helper()
	return problemAt(t, layers, paramBytes, n, memory, 8)
}

// problemAt is problem with a step of batch samples.
func problemAt(t *testing.T, layers int, paramBytes int64, n int, memory, batch int64) *strategy.Problem {
	t.Helper()
	b := graphtest.New("layers").Input("x", 1<<20)
	prev := "x"
	for i := 0; i < layers; i++ {
		w := "w" + string(rune('a'+i))
		name := "l" + string(rune('a'+i))
		b.Param(w, paramBytes).Op(name, 1e9, 1<<20, prev, w)
		prev = name
	}
	b.Output(prev)
	for i := range b.G.Tensors {
		b.G.Tensors[i].DType = graph.Float32 // trainable: float tensors
		b.G.Tensors[i].Shape = []int64{b.G.Tensors[i].Shape[0] / 4}
	}
	g, _, err := train.Build(b.G, train.Options{Optimizer: train.SGD})
	if err != nil {
		t.Fatal(err)
	}
	devs := make([]graphtest.Device, n)
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

func TestRegistry(t *testing.T) {
	names := strategy.Names()
	for name, family := range map[string]string{
		"dp": strategy.FamilyDataParallel, "pipeline:exact": strategy.FamilyPipeline, "pipeline:gpipe": strategy.FamilyPipeline,
		"m-etf": strategy.FamilyPlacement, "ilp": strategy.FamilyPlacement, "dp+heft": strategy.FamilyHybrid,
	} {
		if !slices.Contains(names, name) {
			t.Errorf("%s is not registered (have %v)", name, names)
		}
		if got := strategy.Family(name); got != family {
			t.Errorf("Family(%s) = %q, want %q", name, got, family)
		}
	}
	if _, err := strategy.New("nope", strategy.Config{}); err == nil {
		t.Error("an unknown strategy made no error")
	}
	for _, name := range strategy.AutoStrategies {
		if !slices.Contains(names, name) {
			t.Errorf("auto runs %s, which is not registered", name)
		}
	}
	// The Baechi references are strategies one can ask for, never auto's.
	for _, name := range []string{"m-etf-baechi", "m-sct-baechi"} {
		if strategy.Family(name) != strategy.FamilyPlacement {
			t.Errorf("%s is not a placement strategy (have %v)", name, names)
		}
		if slices.Contains(strategy.AutoStrategies, name) {
			t.Errorf("auto runs the reference %s", name)
		}
	}
}

// TestSearchAcrossFamilies: with memory to spare, splitting the batch
// (data parallelism, replicated pipelines) beats placing the whole batch,
// and auto keeps the fastest, listing why the rest lost; every family's
// best, evaluated without pruning, is no faster.
func TestSearchAcrossFamilies(t *testing.T) {
	p := problem(t, 6, 1<<20, 4, 1<<34)
	ctx := context.Background()
	outs, best, err := strategy.Search(ctx, p, strategy.Config{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if got := outs[best].Family; got == strategy.FamilyPlacement {
		t.Errorf("auto chose %s (%s)", outs[best].Strategy, got)
	}
	if len(outs) != len(strategy.AutoStrategies) {
		t.Errorf("%d outcomes for %d strategies", len(outs), len(strategy.AutoStrategies))
	}
	for _, o := range outs {
		if o.Pruned != "" {
			if !strings.Contains(o.Pruned, "at least") {
				t.Errorf("%s pruned without a bound: %q", o.Strategy, o.Pruned)
			}
			s, _ := strategy.New(o.Strategy, strategy.Config{})
			o = strategy.Evaluate(ctx, p, o.Strategy, s)
		}
		if o.Sim != nil && o.Fits && o.Sim.Step < outs[best].Sim.Step*(1-1e-12) {
			t.Errorf("%s takes %g s, less than auto's %g s", o.Strategy, o.Sim.Step, outs[best].Sim.Step)
		}
		if o.Sim != nil && o.Sim.Step < p.Bound.Throughput*(1-1e-12) {
			t.Errorf("%s takes %g s, below the work bound %g s", o.Strategy, o.Sim.Step, p.Bound.Throughput)
		}
	}
}

// TestReplicasHoldTheirState: when a device cannot hold the whole
// model's parameters, gradients and state, data parallelism does not fit
// and auto chooses a plan that splits the model.
func TestReplicasHoldTheirState(t *testing.T) {
	// Six layers of 64 MiB parameters: 384 MiB of weights, as much again
	// of gradients; devices of 600 MiB.
	p := problem(t, 6, 64<<20, 4, 600<<20)
	ctx := context.Background()
	s, _ := strategy.New("dp", strategy.Config{})
	o := strategy.Evaluate(ctx, p, "dp", s)
	var inf *placer.InfeasibleError
	if o.Fits || !errors.As(o.Err, &inf) {
		t.Fatalf("dp fits=%v err=%v, want a memory failure", o.Fits, o.Err)
	}
	outs, best, err := strategy.Search(ctx, p, strategy.Config{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	if f := outs[best].Family; f == strategy.FamilyDataParallel || !outs[best].Fits {
		t.Errorf("auto chose %s (%s), fits %v", outs[best].Strategy, f, outs[best].Fits)
	}
}

func TestNotApplicable(t *testing.T) {
	p := problem(t, 3, 1<<20, 1, 1<<34)
	s, _ := strategy.New("dp", strategy.Config{})
	if o := strategy.Evaluate(context.Background(), p, "dp", s); !errors.Is(o.Err, strategy.ErrNotApplicable) {
		t.Errorf("dp on one device: %v, want ErrNotApplicable", o.Err)
	}
	outs, best, err := strategy.Search(context.Background(), p, strategy.Config{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	// On one device every plan runs the whole step there: a pipeline of
	// one stage at best.
	if got, want := outs[best].Sim.Step, p.Bound.Seconds(); got > want*(1+1e-9) {
		t.Errorf("one device: auto %s takes %g s, the device alone %g s", outs[best].Strategy, got, want)
	}
}

// TestNotApplicableReasons: a replicating strategy that proposes
// nothing says why: a batch too small to split over the replicas the
// cluster offers is the batch's fault, not the device types'.
func TestNotApplicableReasons(t *testing.T) {
	for _, tc := range []struct {
		strategy string
		devices  int
		batch    int64
		want     string
	}{
		{"dp", 1, 8, "dp: not applicable: no two devices of one type"},
		{"dp", 4, 1, "dp: not applicable: a batch of 1 sample cannot be split over 2 replicas (each replica runs at least one sample): plan a batch of 2 or more"},
		{"dp", 3, 2, "dp: not applicable: a batch of 2 samples cannot be split over 3 replicas"},
		{"dp+m-etf", 3, 8, "dp+m-etf: not applicable: no device class has 4 or more devices"},
		{"dp+m-etf", 4, 1, "dp+m-etf: not applicable: a batch of 1 sample cannot be split over 2 replicas"},
		{"dp+heft", 6, 2, "dp+heft: not applicable: a batch of 2 samples cannot be split over 3 replicas"},
	} {
		p := problemAt(t, 3, 1<<20, tc.devices, 1<<34, tc.batch)
		s, err := strategy.New(tc.strategy, strategy.Config{})
		if err != nil {
			t.Fatal(err)
		}
		o := strategy.Evaluate(context.Background(), p, tc.strategy, s)
		if !errors.Is(o.Err, strategy.ErrNotApplicable) || !strings.Contains(o.Err.Error(), tc.want) {
			t.Errorf("%s on %d devices at batch %d: %v, want not applicable: %q", tc.strategy, tc.devices, tc.batch, o.Err, tc.want)
		}
	}
}

func TestSearchInfeasible(t *testing.T) {
	p := problem(t, 4, 256<<20, 2, 300<<20)
	_, _, err := strategy.Search(context.Background(), p, strategy.Config{}, nil)
	var inf *placer.InfeasibleError
	if !errors.As(err, &inf) || !strings.Contains(inf.Detail, "each strategy tried") {
		t.Fatalf("error %v, want one infeasible error naming every strategy", err)
	}
	for _, name := range []string{"dp", "pipeline:exact", "m-etf"} {
		if !strings.Contains(inf.Detail, name) {
			t.Errorf("the failure does not say why %s failed: %s", name, inf.Detail)
		}
	}
}

// TestSearchSameOnAnyCores: auto runs its strategies side by side, and
// the outcomes (which were pruned, and why, and every plan's step) are
// those of running them one after another in order, on one core as on
// several, on problems where the first strategies prune the rest and
// where they do not.
func TestSearchSameOnAnyCores(t *testing.T) {
	type summary struct {
		strategy, pruned, err string
		fits                  bool
		step                  float64
	}
	summarise := func(outs []strategy.Outcome) []summary {
		var s []summary
		for _, o := range outs {
			x := summary{strategy: o.Strategy, pruned: o.Pruned, fits: o.Fits}
			if o.Err != nil {
				x.err = o.Err.Error()
			}
			if o.Sim != nil {
				x.step = o.Sim.Step
			}
			s = append(s, x)
		}
		return s
	}
	defer runtime.GOMAXPROCS(runtime.GOMAXPROCS(0))
	for _, tc := range []struct {
		name string
		p    func() *strategy.Problem
	}{
		{"six layers on four devices", func() *strategy.Problem { return problem(t, 6, 1<<20, 4, 1<<34) }},
		{"replicas do not fit", func() *strategy.Problem { return problem(t, 6, 64<<20, 4, 600<<20) }},
		{"twelve layers on eight devices", func() *strategy.Problem { return problem(t, 12, 8<<20, 8, 1<<30) }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			var want []summary
			wantBest := -1
			for _, procs := range []int{1, 2, 4, 8} {
				runtime.GOMAXPROCS(procs)
				outs, best, err := strategy.Search(context.Background(), tc.p(), strategy.Config{}, nil)
				if err != nil {
					t.Fatalf("GOMAXPROCS=%d: %v", procs, err)
				}
				got := summarise(outs)
				if procs == 1 {
					pruned := 0
					for _, o := range outs {
						if o.Pruned != "" {
							pruned++
						}
					}
					t.Logf("%d of %d strategies pruned, %s chosen", pruned, len(outs), outs[best].Strategy)
				}
				if want == nil {
					want, wantBest = got, best
					continue
				}
				if best != wantBest || !slices.Equal(got, want) {
					t.Errorf("GOMAXPROCS=%d: best %d, outcomes\n%+v\none core: best %d, outcomes\n%+v", procs, best, got, wantBest, want)
				}
			}
		})
	}
}

// TestLocalRefinesTheBestPlacementBefore: in a search, local starts from
// the fastest fitting placement of the strategies listed before it (not
// from its own seeds) and is never slower than it; alone it runs its
// seeds.
func TestLocalRefinesTheBestPlacementBefore(t *testing.T) {
	p := problem(t, 12, 8<<20, 8, 1<<30)
	outs, _, err := strategy.Search(context.Background(), p, strategy.Config{}, []string{"m-topo", "expert", "local"})
	if err != nil {
		t.Fatal(err)
	}
	seed := outs[0]
	if outs[1].Fits && outs[1].Sim.Step < seed.Sim.Step {
		seed = outs[1]
	}
	local := outs[2]
	if local.Err != nil || !local.Fits {
		t.Fatalf("local: fits=%v, %v", local.Fits, local.Err)
	}
	if local.Sim.Step > seed.Sim.Step {
		t.Errorf("local %g s, slower than its seed %s %g s", local.Sim.Step, seed.Strategy, seed.Sim.Step)
	}
	if len(local.Notes) != 1 || !strings.Contains(local.Notes[0], "from "+seed.Strategy+"'s placement") {
		t.Errorf("local's notes %q do not name its seed %s", local.Notes, seed.Strategy)
	}
	s, _ := strategy.New("local", strategy.Config{})
	alone := strategy.Evaluate(context.Background(), p, "local", s)
	if alone.Err != nil || len(alone.Notes) != 1 || !slices.ContainsFunc(strategy.LocalSeeds, func(s string) bool {
		return strings.Contains(alone.Notes[0], "from "+s+"'s placement")
	}) {
		t.Errorf("local alone: %v, notes %q; want a start from one of %v", alone.Err, alone.Notes, strategy.LocalSeeds)
	}
}

// TestLocalTooLarge: a work budget too small for the graph makes local
// not applicable, which auto lists without failing.
func TestLocalTooLarge(t *testing.T) {
	p := problem(t, 6, 1<<20, 4, 1<<34)
	cfg := strategy.Config{Placer: placer.Config{RefineWork: 10}}
	outs, _, err := strategy.Search(context.Background(), p, cfg, []string{"m-etf", "local"})
	if err != nil {
		t.Fatal(err)
	}
	if !errors.Is(outs[1].Err, strategy.ErrNotApplicable) || !errors.Is(outs[1].Err, placer.ErrTooLarge) {
		t.Errorf("local with a budget of 10 ops: %v", outs[1].Err)
	}
}

// TestZeROFitsWhereDDPDoesNot: with Adam, a replica holds its weights,
// their gradients and two moments (16 bytes a float32 parameter); on
// devices that hold the weights and gradients but not the moments too,
// plain data parallelism does not fit and dp proposes a ZeRO variant
// that does, which auto keeps when it is the fastest plan that fits.
// Asked for no sharding, dp fails.
func TestZeROFitsWhereDDPDoesNot(t *testing.T) {
	// Four layers of 16 MiB weights: 64 MiB of weights, 64 MiB of
	// gradients, 128 MiB of moments; DDP needs over 256 MiB a device,
	// ZeRO-2 on four replicas about 64 + 16 + 32 MiB and a bucket.
	b := graphtest.New("layers").Input("x", 1<<16)
	prev := "x"
	for i := 0; i < 4; i++ {
		w, name := "w"+string(rune('a'+i)), "l"+string(rune('a'+i))
		b.Param(w, 16<<20).Op(name, 1e9, 1<<16, prev, w)
		prev = name
	}
	b.Output(prev)
	for i := range b.G.Tensors {
		b.G.Tensors[i].DType = graph.Float32
		b.G.Tensors[i].Shape = []int64{b.G.Tensors[i].Shape[0] / 4}
	}
	g, _, err := train.Build(b.G, train.Options{Optimizer: train.Adam})
	if err != nil {
		t.Fatal(err)
	}
	devs := make([]graphtest.Device, 4)
	for i := range devs {
		devs[i] = graphtest.Device{FLOPS: 1e12, Memory: 200 << 20}
	}
	c := graphtest.Cluster(1e11, 1e-6, devs...)
	pp, err := placer.NewProblem(g, cost.NewTable(g, c, cost.Roofline{ComputeEfficiency: 1, MemoryEfficiency: 1}))
	if err != nil {
		t.Fatal(err)
	}
	p := strategy.NewProblem(pp, 8)
	ctx := context.Background()
	none, _ := strategy.New("dp", strategy.Config{Sharding: "none"})
	if o := strategy.Evaluate(ctx, p, "dp", none); o.Fits {
		t.Fatalf("plain DDP fits (peak %d): the test needs it not to", o.Sim.PeakMemory[0])
	}
	dp, _ := strategy.New("dp", strategy.Config{})
	o := strategy.Evaluate(ctx, p, "dp", dp)
	if !o.Fits || o.Plan.Stages[0].Sharding == sim.NoSharding {
		t.Fatalf("dp: fits %v, sharding %v, err %v; want a ZeRO plan that fits", o.Fits, o.Plan.Stages[0].Sharding, o.Err)
	}
	outs, best, err := strategy.Search(ctx, p, strategy.Config{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	for _, x := range outs {
		if x.Sim != nil && x.Fits && x.Sim.Step < outs[best].Sim.Step {
			t.Errorf("%s is faster than auto's choice", x.Strategy)
		}
	}
	if outs[best].Strategy == "dp" && outs[best].Plan.Stages[0].Sharding == sim.NoSharding {
		t.Errorf("auto chose plain DDP, which does not fit")
	}
}

// TestSeededNotes: a seeded strategy run inside a search (ilp, started
// from the best placement before it) keeps its solver's notes, which the
// plan's report and docs/strategies.md's table read.
func TestSeededNotes(t *testing.T) {
	p := problem(t, 6, 1<<20, 4, 1<<34)
	outs, _, err := strategy.Search(context.Background(), p, strategy.Config{}, []string{"m-etf", "ilp"})
	if err != nil {
		t.Fatal(err)
	}
	ilp := outs[len(outs)-1]
	if ilp.Strategy != "ilp" || ilp.Err != nil {
		t.Fatalf("last outcome %s: %v", ilp.Strategy, ilp.Err)
	}
	if !slices.ContainsFunc(ilp.Notes, func(n string) bool { return strings.Contains(n, "MILP on") }) {
		t.Errorf("ilp's notes lack the MILP's status: %q", ilp.Notes)
	}
}
