package placer

import (
	"context"
	"math/rand/v2"
	"slices"
	"testing"

	"github.com/opplace/opplace/cost"
	"github.com/opplace/opplace/graph"
	"github.com/opplace/opplace/graph/graphtest"
	"github.com/opplace/opplace/sim"
)

// TestPlacersKeepRules places random DAGs under random user rules (some
// ops limited to some devices, two groups kept apart) with every placer
// that takes them, and checks each placement against the rules; placers
// that do not take separate rules must refuse, not break them.
func TestPlacersKeepRules(t *testing.T) {
	r := rand.New(rand.NewPCG(23, 5))
	placers := []string{"m-etf", "heft", "m-sct", "m-topo", "expert", "single", "ilp", "m-etf-baechi"}
	placed, refused := map[string]int{}, map[string]int{}
	for i := 0; i < 12; i++ {
		n := 20 + r.IntN(120)
		b := graphtest.RandomDAG(r, n, i%2 == 1)
		nd := 3 + r.IntN(4)
		c := randomCluster(r, nd, 1<<40, i%3 == 0)
		table := cost.NewTable(b.G, c, cost.Roofline{ComputeEfficiency: 1, MemoryEfficiency: 1})
		g := b.G
		// Limit a tenth of the colocation classes to a random non-empty
		// subset of the devices.
		allowed := graph.NewDeviceSets(len(g.Ops), nd)
		classes := graph.ColocationGroups(g)
		subset := map[graph.OpID][]int{}
		for op := range g.Ops {
			root := classes.Find(graph.OpID(op))
			if _, ok := subset[root]; !ok {
				subset[root] = nil
				if r.IntN(10) == 0 {
					for d := 0; d < nd; d++ {
						if r.IntN(2) == 0 {
							subset[root] = append(subset[root], d)
						}
					}
				}
			}
			for d := 0; d < nd; d++ {
				if s := subset[root]; s == nil || slices.Contains(s, d) {
					allowed.Add(graph.OpID(op), d)
				}
			}
		}
		// Two groups of a few forward ops each, whole classes, kept apart.
		apart := Apart{Rule: "test separate", Group: make([]int8, len(g.Ops))}
		group := map[graph.OpID]int8{}
		for op := range apart.Group {
			apart.Group[op] = -1
			root := classes.Find(graph.OpID(op))
			x, ok := group[root]
			if !ok {
				x = -1
				if len(subset[root]) == 0 && r.IntN(8) == 0 {
					x = int8(r.IntN(2))
				}
				group[root] = x
			}
			apart.Group[op] = x
		}
		p, err := NewProblem(g, table.WithAllowed(allowed))
		if err != nil {
			t.Fatal(err)
		}
		p.Apart = []Apart{apart}
		for _, name := range placers {
			if name == "ilp" && i >= 4 {
				continue // a few seconds each
			}
			pl, err := ruleTestPlacer(name).Place(context.Background(), p)
			if err != nil {
				refused[name]++
				t.Logf("graph %d, %s: %v", i, name, err)
				if name != "ilp" && name != "m-etf-baechi" && name != "single" {
					t.Errorf("graph %d (%d ops, %d devices), %s: %v", i, n, nd, name, err)
				}
				continue
			}
			placed[name]++
			checkPlacementRules(t, p, pl, name)
			if name == "m-etf" {
				ref, err := Refine(context.Background(), p, pl, RefineOptions{})
				if err != nil {
					t.Fatalf("local search: %v", err)
				}
				checkPlacementRules(t, p, ref.Placement, "local")
			}
		}
	}
	t.Logf("placed %v, refused %v", placed, refused)
	if refused["m-etf-baechi"] != 12 {
		t.Errorf("m-etf-baechi must refuse separate rules: refused %v", refused)
	}
	if placed["ilp"] != 4 {
		t.Errorf("ilp placed %d of the 4 graphs it ran on under the rules", placed["ilp"])
	}
}

// checkPlacementRules checks a placement against the problem's rules:
// every op on a device it may use, the groups of every separate rule on
// disjoint devices.
func checkPlacementRules(t *testing.T, p *Problem, pl sim.Placement, name string) {
	t.Helper()
	for op, d := range pl.Device {
		if !p.Costs.CanRun(graph.OpID(op), d) {
			t.Errorf("%s: op %q on device %d, which its rules leave out", name, p.Graph.Ops[op].Name, d)
		}
	}
	for _, a := range p.Apart {
		owner := map[int]int8{}
		for op, x := range a.Group {
			if x < 0 {
				continue
			}
			d := pl.Device[op]
			if o, ok := owner[d]; ok && o != x {
				t.Errorf("%s: device %d holds groups %d and %d of %s", name, d, o, x, a.Rule)
			}
			owner[d] = x
		}
	}
}

// ruleTestPlacer is the placer of that name, the ilp with a time limit
// of a few seconds: Cbc has been seen to claim proven infeasibility, and
// once to crash, when its limit was half a second.
func ruleTestPlacer(name string) Placer {
	if name == "ilp" {
		return &ILP{MaxSeconds: 3}
	}
	return newPlacer(name)
}

// TestPreferSteersPlacers: a chain runs fastest all on the fast device;
// a heavy preference against it moves the op it names for heft, m-etf
// and the local search, and a light one does not.
func TestPreferSteersPlacers(t *testing.T) {
	b := graphtest.New("chain").Input("x", 1<<10).
		Op("a", 1e9, 1<<10, "x").Op("b", 1e9, 1<<10, "a").Op("c", 1e9, 1<<10, "b")
	c := graphtest.Cluster(1e9, 0, graphtest.Device{FLOPS: 2e9, Memory: 1 << 30}, graphtest.Device{FLOPS: 1e9, Memory: 1 << 30})
	for _, tc := range []struct {
		weight float64 // seconds per op against the rule
		moved  bool
	}{{10, true}, {1e-6, false}} {
		p, err := NewProblem(b.G, cost.NewTable(b.G, c, cost.Roofline{ComputeEfficiency: 1, MemoryEfficiency: 1}))
		if err != nil {
			t.Fatal(err)
		}
		// "b rather not on d0".
		p.Prefer = []Preference{{Ops: []int32{0, 1, 0}, Devices: []bool{true, false}, Not: true, Weight: tc.weight}}
		for _, name := range []string{"heft", "m-etf"} {
			pl, err := newPlacer(name).Place(context.Background(), p)
			if err != nil {
				t.Fatal(err)
			}
			if got := pl.Device[1] == 1; got != tc.moved {
				t.Errorf("%s, weight %g s: b on device %d", name, tc.weight, pl.Device[1])
			}
		}
		ref, err := Refine(context.Background(), p, sim.Placement{Device: []int{0, 0, 0}}, RefineOptions{})
		if err != nil {
			t.Fatal(err)
		}
		if got := ref.Placement.Device[1] == 1; got != tc.moved {
			t.Errorf("local search, weight %g s: b on device %d", tc.weight, ref.Placement.Device[1])
		}
	}
}
