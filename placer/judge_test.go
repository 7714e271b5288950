package placer

import (
	"context"
	"errors"
	"math"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"

	"github.com/opplace/opplace/cluster"
	"github.com/opplace/opplace/cost"
	"github.com/opplace/opplace/graph"
	"github.com/opplace/opplace/graph/graphtest"
	"github.com/opplace/opplace/sim"
)

// randomCluster is nd devices of one or two speeds, each with memory
// bytes, on one host whose fabric every transfer shares or, with direct,
// joined pairwise by links of their own.
func randomCluster(r *rand.Rand, nd int, memory int64, direct bool) *cluster.Cluster {
	devs := make([]graphtest.Device, nd)
	for d := range devs {
		devs[d] = graphtest.Device{FLOPS: 1e9 * float64(1+r.IntN(2)), Memory: memory}
	}
	c := graphtest.Cluster(1e9*float64(1+r.IntN(20)), 1e-6*float64(r.IntN(30)), devs...)
	if direct {
		c.Direct = map[[2]int]cluster.Link{}
		for a := 0; a < nd; a++ {
			for b := a + 1; b < nd; b++ {
				c.Direct[[2]int{a, b}] = cluster.Link{Kind: "direct", Bandwidth: 2e10, Latency: 2e-6}
			}
		}
	}
	return c
}

// schedulers are the list placers, each as a scheduler of a fresh
// state, so a test sees its predicted times and what it does before
// placeFitting checks it with the simulator.
func schedulers(p *Problem) map[string]func(*listState) (sim.Placement, error) {
	ctx := context.Background()
	return map[string]func(*listState) (sim.Placement, error){
		"m-etf":  func(s *listState) (sim.Placement, error) { return etf(ctx, s) },
		"heft":   func(s *listState) (sim.Placement, error) { return placeHEFT(ctx, s) },
		"expert": func(s *listState) (sim.Placement, error) { return placeExpert(ctx, s) },
		"m-topo": func(s *listState) (sim.Placement, error) { return placeTopo(ctx, s) },
		"m-sct": func(s *listState) (sim.Placement, error) {
			gs, err := Group(p)
			if err != nil {
				return sim.Placement{}, err
			}
			gg := newGroupGraph(p, gs)
			x, err := sctLP(p, gg)
			if err != nil {
				return sim.Placement{}, err
			}
			return sct(ctx, s, favourites(p, gg, x))
		},
	}
}

// onOne is the simulator's peak with every op of p on device 0.
func onOne(t *testing.T, p *Problem) int64 {
	res, err := p.Simulate(sim.Placement{Device: make([]int, len(p.Graph.Ops))})
	if err != nil {
		t.Fatal(err)
	}
	return res.PeakMemory[0]
}

// TestPlacementsFitTheJudge: on random DAGs (20 to 300 ops, inference
// and training steps, 2 to 8 devices on a shared fabric or direct links,
// memory from room for the whole graph on every device down to an even
// share of what it holds on one), every placement a list placer returns
// fits the simulator's memory. Tight memory makes greedy placers fail,
// which is allowed, so the test insists that each placed at least half
// the graphs: the property is not met by failing. It also counts the
// placements that fit only because placeFitting placed again.
func TestPlacementsFitTheJudge(t *testing.T) {
	if testing.Short() {
		t.Skip("random DAGs on every list placer")
	}
	r := rand.New(rand.NewPCG(17, 4))
	placed, failed, again := map[string]int{}, map[string]int{}, map[string]int{}
	for i := 0; i < 24; i++ {
		n := 20 + r.IntN(281)
		train := i%3 == 2
		b := graphtest.RandomDAG(r, n, train)
		nd := 2 + r.IntN(7)
		c := randomCluster(r, nd, 1<<40, i%2 == 0)
		p, err := NewProblem(b.G, cost.NewTable(b.G, c, cost.Roofline{ComputeEfficiency: 1, MemoryEfficiency: 1}))
		if err != nil {
			t.Fatal(err)
		}
		var largest int64
		for op := range b.G.Ops {
			largest = max(largest, p.Costs.WorkingSet(graph.OpID(op)))
		}
		memory := int64(float64(onOne(t, p))/float64(nd)*[]float64{float64(nd), 2, 1.5, 1.2, 1}[i%5]) + largest
		for d := range c.Devices {
			c.Devices[d].Memory = memory
		}
		for name, schedule := range schedulers(p) {
			pl, err := newPlacer(name).Place(context.Background(), p)
			if err != nil {
				if !errors.As(err, new(*InfeasibleError)) {
					t.Fatalf("graph %d (%d ops, train %v), %s: %v", i, n, train, name, err)
				}
				failed[name]++
				continue
			}
			placed[name]++
			res, err := p.Simulate(pl)
			if err != nil {
				t.Fatal(err)
			}
			if !p.Fits(res) {
				t.Errorf("graph %d (%d ops, train %v, %d devices of %d B), %s: the simulator peaks at %v", i, n, train, nd, memory, name, res.PeakMemory)
			}
			s, err := newListState(p, nil)
			if err != nil {
				t.Fatal(err)
			}
			if first, err := schedule(s); err != nil || !reflect.DeepEqual(first, pl) {
				again[name]++
			}
		}
	}
	t.Logf("placed %v (of which placed again %v), infeasible %v", placed, again, failed)
	for name, k := range placed {
		if k < failed[name] {
			t.Errorf("%s placed %d graphs and failed %d: too few placements to test", name, k, failed[name])
		}
	}
}

func newPlacer(name string) Placer {
	pl, err := New(name)
	if err != nil {
		panic(err)
	}
	return pl
}

// TestPredictedStep compares the step a time-driven list placer
// predicts, the latest end of its schedule, with the simulator's, on
// random DAGs with room for everything, whose transfers take from a few
// microseconds to a few milliseconds beside ops of 0.05 to 20 ms. Both
// run the same ops for the same times and move tensors over the same
// channels; they differ where the simulator's device, idle, starts a
// ready op of later priority than the one the placer planned next (so a
// planned op waits), where HEFT put an op into an idle gap the simulator
// fills with another (it never leaves a device idle), where m-SCT keeps
// a device for a favourite child, and where a placer puts a transfer into
// an idle slot of a channel that the simulator, serving transfers in the
// order they are requested, leaves idle. On these 30 graphs the largest
// differences measured were 6.9% (m-ETF), 10.6% (m-SCT) and 14.6%
// (HEFT), the medians 0.4%, 0.3% and 4.1%; with transfers timed as if
// every link were free, before the placers shared the simulator's
// channels, the largest were 42% (m-ETF) and 52% (HEFT). The tolerances
// leave room for about half as much again. (expert and m-topo are left out: they place
// in topological order at each device's latest end, not by time, so the
// simulator, which starts any ready op, runs their plans faster than
// they predict.)
func TestPredictedStep(t *testing.T) {
	tolerance := map[string]struct{ worst, median float64 }{
		"m-etf": {0.10, 0.01},
		"m-sct": {0.15, 0.01},
		"heft":  {0.20, 0.07},
	}
	errs := map[string][]float64{}
	r := rand.New(rand.NewPCG(5, 11))
	for i := 0; i < 30; i++ {
		n := 20 + r.IntN(281)
		b := graphtest.RandomDAG(r, n, i%3 == 2)
		nd := 2 + r.IntN(7)
		c := randomCluster(r, nd, 1<<40, i%2 == 0)
		p, err := NewProblem(b.G, cost.NewTable(b.G, c, cost.Roofline{ComputeEfficiency: 1, MemoryEfficiency: 1}))
		if err != nil {
			t.Fatal(err)
		}
		for name, tol := range tolerance {
			s, err := newListState(p, nil)
			if err != nil {
				t.Fatal(err)
			}
			pl, err := schedulers(p)[name](s)
			if err != nil {
				t.Fatal(err)
			}
			res, err := p.Simulate(pl)
			if err != nil {
				t.Fatal(err)
			}
			predicted := slices.Max(s.end)
			e := math.Abs(predicted-res.Step) / res.Step
			errs[name] = append(errs[name], e)
			if e > tol.worst {
				t.Errorf("graph %d (%d ops, train %v, %d devices), %s: predicted %.4g s, simulated %.4g s: %.1f%% apart",
					i, n, i%3 == 2, nd, name, predicted, res.Step, 100*e)
			}
		}
	}
	for name, e := range errs {
		slices.Sort(e)
		if m := e[len(e)/2]; m > tolerance[name].median {
			t.Errorf("%s: median difference %.2f%%, want at most %.2f%%", name, 100*m, 100*tolerance[name].median)
		}
		t.Logf("%s: median %.2f%%, worst %.2f%%", name, 100*e[len(e)/2], 100*e[len(e)-1])
	}
}
