package strategy_test

import (
	"context"
	"errors"
	"math"
	"slices"
	"testing"

	"github.com/opplace/opplace/cost"
	"github.com/opplace/opplace/graph/graphtest"
	"github.com/opplace/opplace/placer"
	"github.com/opplace/opplace/sim"
	"github.com/opplace/opplace/strategy"
)

// diamond is x -> a -> {b, c} -> d, each op 1 GFLOP writing 1 MB, on two
// devices of 1 TFLOP/s joined by 1 GB/s links of 1 us: every op takes 1
// ms, a 1 MB transfer 1 ms + 1 us.
func diamond(t *testing.T) *strategy.Problem {
	t.Helper()
	b := graphtest.New("diamond").Input("x", 1e6).
		Op("a", 1e9, 1e6, "x").Op("b", 1e9, 1e6, "a").Op("c", 1e9, 1e6, "a").Op("d", 1e9, 1e6, "b", "c").Output("d")
	c := graphtest.Cluster(1e9, 1e-6, graphtest.Device{FLOPS: 1e12, Memory: 1 << 30}, graphtest.Device{FLOPS: 1e12, Memory: 1 << 30})
	p, err := placer.NewProblem(b.G, cost.NewTable(b.G, c, cost.Roofline{ComputeEfficiency: 1, MemoryEfficiency: 1}))
	if err != nil {
		t.Fatal(err)
	}
	return strategy.NewProblem(p, 1)
}

func evaluateGiven(p *strategy.Problem, g *strategy.Given) strategy.Outcome {
	p.Given = g
	s, _ := strategy.New(strategy.GivenStrategy, strategy.Config{})
	return strategy.Evaluate(context.Background(), p, strategy.GivenStrategy, s)
}

// TestGivenSimulatesAsGiven: the given strategy's step is the
// simulator's for exactly the placement given, worked out by hand on the
// diamond; ops left out are an error unless a placer fills them in, the
// given ones staying where they were put.
func TestGivenSimulatesAsGiven(t *testing.T) {
	const ms, hop = 1e-3, 1e-3 + 1e-6 // an op; a 1 MB transfer
	for _, tc := range []struct {
		name    string
		devices []int // a, b, c, d
		want    float64
	}{
		// One device: a, b, c, d one after another.
		{"all on d0", []int{0, 0, 0, 0}, 4 * ms},
		// c beside b on d1: a's output crosses, c's comes back.
		{"c on d1", []int{0, 0, 1, 0}, ms + hop + ms + hop + ms},
		// b and c on d1: a's output crosses once; c runs while b's
		// output crosses, and its own crosses after it: d starts after
		// a, b and three hops.
		{"b, c on d1", []int{0, 1, 1, 0}, ms + hop + ms + hop + hop + ms},
	} {
		t.Run(tc.name, func(t *testing.T) {
			p := diamond(t)
			// The graph's ops are x's consumers a..d, in that order.
			o := evaluateGiven(p, &strategy.Given{Source: "p.yaml", Plan: sim.Plan{Placement: sim.Placement{Device: tc.devices}}})
			if o.Err != nil {
				t.Fatal(o.Err)
			}
			if math.Abs(o.Sim.Step-tc.want) > 1e-12 {
				t.Errorf("step %.9g s, want %.9g", o.Sim.Step, tc.want)
			}
			if !slices.Equal(o.Plan.Device, tc.devices) || o.Family != strategy.FamilyPlacement {
				t.Errorf("planned %v (%s), want %v (placement)", o.Plan.Device, o.Family, tc.devices)
			}
		})
	}

	p := diamond(t)
	o := evaluateGiven(p, &strategy.Given{Source: "p.yaml", Plan: sim.Plan{Placement: sim.Placement{Device: []int{1, -1, 0, -1}}}})
	var pe *strategy.PlacementError
	want := `p.yaml leaves 2 ops of 4 unplaced ("b", "d"): give them devices, or name a placer to place them`
	if !errors.As(o.Err, &pe) || o.Err.Error() != want {
		t.Errorf("partial placement: %v, want the placement error %s", o.Err, want)
	}
	o = evaluateGiven(p, &strategy.Given{Source: "p.yaml", Plan: sim.Plan{Placement: sim.Placement{Device: []int{1, -1, 0, -1}}}, Fill: "m-etf"})
	if o.Err != nil {
		t.Fatal(o.Err)
	}
	if o.Plan.Device[0] != 1 || o.Plan.Device[2] != 0 || !slices.Contains(o.Notes, "2 ops of 4 given, 2 placed by m-etf") {
		t.Errorf("filled placement %v, notes %q: want a on 1, c on 0 and a note", o.Plan.Device, o.Notes)
	}
	if p.Graph.Ops[0].Device != "" {
		t.Error("filling in pinned the problem's own graph")
	}

	p.Given = nil
	s, _ := strategy.New(strategy.GivenStrategy, strategy.Config{})
	if o := strategy.Evaluate(context.Background(), p, strategy.GivenStrategy, s); !errors.Is(o.Err, strategy.ErrNotApplicable) {
		t.Errorf("no placement given: %v, want not applicable", o.Err)
	}
}

// TestGivenReplaysPlans: the plan another strategy found, given back with
// its order and shape, simulates to the same step and keeps its family.
func TestGivenReplaysPlans(t *testing.T) {
	p := problem(t, 6, 1<<20, 4, 1<<34)
	ctx := context.Background()
	for _, name := range []string{"m-etf", "heft", "dp", "pipeline:pipedream", "dp+m-etf"} {
		s, _ := strategy.New(name, strategy.Config{})
		o := strategy.Evaluate(ctx, p, name, s)
		if o.Err != nil {
			t.Fatalf("%s: %v", name, o.Err)
		}
		again := evaluateGiven(p, &strategy.Given{Source: name, Plan: *o.Plan})
		p.Given = nil
		if again.Err != nil {
			t.Fatalf("%s given back: %v", name, again.Err)
		}
		if again.Sim.Step != o.Sim.Step || again.Family != o.Family {
			t.Errorf("%s given back: %g s (%s), want %g s (%s)", name, again.Sim.Step, again.Family, o.Sim.Step, o.Family)
		}
	}
}
