package placer_test

import (
	"context"
	"fmt"
	"reflect"
	"testing"

	"github.com/opplace/opplace/cost"
	"github.com/opplace/opplace/graph"
	"github.com/opplace/opplace/graph/graphtest"
	"github.com/opplace/opplace/placer"
	"github.com/opplace/opplace/sim"
)

// TestRefineNeverWorsens starts the local search from every list placer's
// placement of layered DAGs and checks what it returns: simulated again,
// the same step; within memory; never slower than the start; the same
// placement on a second run.
func TestRefineNeverWorsens(t *testing.T) {
	c := graphtest.Cluster(25*giga, 2e-6, dev(100*giga, 1<<40), dev(100*giga, 1<<40), dev(100*giga, 1<<40), dev(100*giga, 1<<40))
	improved := 0
	for _, seed := range []uint32{1, 2, 3} {
		g := layered(200, 6, seed)
		p, err := placer.NewProblem(g.G, cost.NewTable(g.G, c, cost.Roofline{ComputeEfficiency: 1, MemoryEfficiency: 1}))
		if err != nil {
			t.Fatal(err)
		}
		for _, name := range []string{"m-etf", "heft", "m-topo"} {
			t.Run(fmt.Sprintf("%s/%d", name, seed), func(t *testing.T) {
				start, err := newPlacer(t, name).Place(context.Background(), p)
				if err != nil {
					t.Fatal(err)
				}
				before, err := p.Simulate(start)
				if err != nil {
					t.Fatal(err)
				}
				r, err := placer.Refine(context.Background(), p, start, placer.RefineOptions{Work: 200 * 300})
				if err != nil {
					t.Fatal(err)
				}
				again, err := p.Simulate(r.Placement)
				if err != nil {
					t.Fatal(err)
				}
				switch {
				case again.Step != r.Sim.Step:
					t.Errorf("refined step %g, simulated again %g", r.Sim.Step, again.Step)
				case !p.Fits(again):
					t.Errorf("refined placement does not fit: %v", again.PeakMemory)
				case r.StartStep != before.Step:
					t.Errorf("start step %g, the start placement simulates to %g", r.StartStep, before.Step)
				case r.Sim.Step > before.Step:
					t.Errorf("refined %g ms, slower than the start's %g ms", r.Sim.Step*1e3, before.Step*1e3)
				case r.Tried > 300:
					t.Errorf("tried %d placements, over the budget of 300", r.Tried)
				}
				if r.Sim.Step < before.Step {
					improved++
				}
				r2, err := placer.Refine(context.Background(), p, start, placer.RefineOptions{Work: 200 * 300})
				if err != nil {
					t.Fatal(err)
				}
				if !reflect.DeepEqual(r.Placement, r2.Placement) {
					t.Error("two runs of the same search placed differently")
				}
			})
		}
	}
	if improved == 0 {
		t.Error("the search improved none of the 9 starting placements")
	}
}

// TestRefineMovesOffTheCriticalPath gives the search a placement with
// both branches of a fork on one device: moving one branch to the idle
// device halves the step.
func TestRefineMovesOffTheCriticalPath(t *testing.T) {
	g := parallel()
	p, err := placer.NewProblem(g.G, cost.NewTable(g.G, twoFast, cost.Roofline{ComputeEfficiency: 1, MemoryEfficiency: 1}))
	if err != nil {
		t.Fatal(err)
	}
	r, err := placer.Refine(context.Background(), p, sim.Placement{Device: []int{0, 0}}, placer.RefineOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if r.StartStep != 4 || r.Sim.Step != 2 || r.Moved != 1 {
		t.Fatalf("step %g -> %g in %d moves; want 4 -> 2 in 1", r.StartStep, r.Sim.Step, r.Moved)
	}
}

// TestRefineRefusesAnOverflowingStart: the search keeps placements
// within memory, so it starts from one.
func TestRefineRefusesAnOverflowingStart(t *testing.T) {
	g := tight()
	p, err := placer.NewProblem(g.G, cost.NewTable(g.G, small, cost.Roofline{ComputeEfficiency: 1, MemoryEfficiency: 1}))
	if err != nil {
		t.Fatal(err)
	}
	if _, err := placer.Refine(context.Background(), p, sim.Placement{Device: []int{0, 0}}, placer.RefineOptions{}); err == nil {
		t.Fatal("refined a placement that does not fit")
	}
}

// BenchmarkRefine is the local search from m-etf's placement of layered
// DAGs on four devices, with its default work: it reports the step
// before and after (ms) and the placements tried.
func BenchmarkRefine(b *testing.B) {
	c := graphtest.Cluster(25*giga, 2e-6, dev(100*giga, 1<<40), dev(100*giga, 1<<40), dev(100*giga, 1<<40), dev(100*giga, 1<<40))
	for _, n := range []int{300, 1000, 10000} {
		b.Run(fmt.Sprint(n), func(b *testing.B) {
			g := layered(n, 6, 7)
			p, err := placer.NewProblem(g.G, cost.NewTable(g.G, c, cost.Roofline{ComputeEfficiency: 1, MemoryEfficiency: 1}))
			if err != nil {
				b.Fatal(err)
			}
			pl, _ := placer.New("m-etf")
			start, err := pl.Place(context.Background(), p)
			if err != nil {
				b.Fatal(err)
			}
			b.ResetTimer()
			var r *placer.Refined
			for i := 0; i < b.N; i++ {
				if r, err = placer.Refine(context.Background(), p, start, placer.RefineOptions{}); err != nil {
					b.Fatal(err)
				}
			}
			b.ReportMetric(r.StartStep*1e3, "start_ms")
			b.ReportMetric(r.Sim.Step*1e3, "refined_ms")
			b.ReportMetric(float64(r.Tried), "tried")
			b.ReportMetric(float64(r.Moved), "moved")
		})
	}
}

// TestRefineEndsOnTies: ops that take no time tie in the simulated
// schedule, and the walk back along the critical path must still end:
// it went round in a loop on the published Inception-V3 training graph
// (costed's TestPeers), where gradient ops of no time ran at the instant
// an op of the same device started. Here "use" is added before "make"
// (its ID comes first), both on one device, both of no time.
func TestRefineEndsOnTies(t *testing.T) {
	g := graph.New("ties", 0, 0)
	tensor := func(name string) graph.TensorID {
		id, err := g.AddTensor(graph.Tensor{Name: name, DType: graph.Uint8, Shape: []int64{8}, ShapeKnown: true, Kind: graph.Activation})
		if err != nil {
			t.Fatal(err)
		}
		return id
	}
	made, used := tensor("made"), tensor("used")
	for _, op := range []graph.Op{
		{Name: "use", Type: "Identity", Inputs: []graph.TensorID{made}, Outputs: []graph.TensorID{used}},
		{Name: "make", Type: "Identity", Outputs: []graph.TensorID{made}},
	} {
		if _, err := g.AddOp(op); err != nil {
			t.Fatal(err)
		}
	}
	g.Outputs = []graph.TensorID{used}
	p, err := placer.NewProblem(g, cost.NewTable(g, twoFast, cost.Roofline{ComputeEfficiency: 1, MemoryEfficiency: 1}))
	if err != nil {
		t.Fatal(err)
	}
	r, err := placer.Refine(context.Background(), p, sim.Placement{Device: []int{0, 0}}, placer.RefineOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if r.Sim.Step > r.StartStep {
		t.Errorf("%g -> %g", r.StartStep, r.Sim.Step)
	}
}
