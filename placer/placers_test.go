package placer_test

import (
	"context"
	"math"
	"reflect"
	"testing"

	"github.com/opplace/opplace/cluster"
	"github.com/opplace/opplace/cost"
	"github.com/opplace/opplace/graph"
	"github.com/opplace/opplace/graph/graphtest"
	"github.com/opplace/opplace/placer"
)

// newPlacers lists every registered strategy, with ilp kept small enough
// for unit tests.
func newPlacer(t *testing.T, name string) placer.Placer {
	t.Helper()
	if name == "ilp" {
		return &placer.ILP{MaxNodes: 50}
	}
	pl, err := placer.New(name)
	if err != nil {
		t.Fatal(err)
	}
	return pl
}

var (
	chain3 = func() *graphtest.Builder {
		// Transfers of a's and b's 4 GB outputs cost 4 s each at 1 GB/s:
		// splitting the 3 s chain can only lose.
		return graphtest.New("chain").Input("x", 8).Op("a", 1e9, 4e9, "x").Op("b", 1e9, 4e9, "a").Op("c", 1e9, 8, "b")
	}
	parallel = func() *graphtest.Builder {
		return graphtest.New("par").Input("x", 8).Op("a", 2e9, 8, "x").Op("b", 2e9, 8, "x")
	}
	tight = func() *graphtest.Builder {
		// 600-byte weights on 1000-byte devices: a and b cannot share one.
		return graphtest.New("mem").Input("x", 8).Param("w1", 600).Param("w2", 600).
			Op("a", 1e9, 8, "x", "w1").Op("b", 1e9, 8, "a", "w2")
	}
	twoFast = graphtest.Cluster(giga, 0, dev(giga, 1<<40), dev(giga, 1<<40))
	small   = graphtest.Cluster(giga, 0, dev(giga, 1000), dev(giga, 1000))
)

// TestNewPlacersOnHandSolvedGraphs checks each new placer against
// placements worked out by hand. Times: an op of F FLOPs takes F/1e9 s.
func TestNewPlacersOnHandSolvedGraphs(t *testing.T) {
	tests := []struct {
		name    string
		placer  string
		build   func() *graphtest.Builder
		cluster *cluster.Cluster
		devices map[string]int
		step    float64
	}{
		// Splitting is worse than one device: everyone but expert keeps
		// the chain together (3 s); expert's compute-balanced cut (a, b on
		// d0 up to half the work, c on d1) pays b's 4 s transfer: 7 s.
		{"m-topo keeps a chain within its memory share", "m-topo", chain3, twoFast, map[string]int{"a": 0, "b": 0, "c": 0}, 3},
		{"m-sct keeps a chain together", "m-sct", chain3, twoFast, map[string]int{"a": 0, "b": 0, "c": 0}, 3},
		{"heft keeps a chain together", "heft", chain3, twoFast, map[string]int{"a": 0, "b": 0, "c": 0}, 3},
		{"ilp keeps a chain together", "ilp", chain3, twoFast, map[string]int{"a": 0, "b": 0, "c": 0}, 3},
		{"expert cuts a chain by compute, paying the transfer", "expert", chain3, twoFast, map[string]int{"a": 0, "b": 0, "c": 1}, 7},
		// Parallel branches: 2 s on two devices, 4 s on one.
		{"m-sct runs branches in parallel", "m-sct", parallel, twoFast, map[string]int{"a": 0, "b": 1}, 2},
		{"heft runs branches in parallel", "heft", parallel, twoFast, map[string]int{"a": 0, "b": 1}, 2},
		{"ilp runs branches in parallel", "ilp", parallel, twoFast, map[string]int{"a": 0, "b": 1}, 2},
		{"expert gives each device half the compute", "expert", parallel, twoFast, map[string]int{"a": 0, "b": 1}, 2},
		{"m-topo fills one device while the model fits its share", "m-topo", parallel, twoFast, map[string]int{"a": 0, "b": 0}, 4},
		// Memory forces the split: 2 s plus an 8-byte transfer.
		{"m-topo splits when memory forces it", "m-topo", tight, small, map[string]int{"a": 0, "b": 1}, 2 + 8/giga},
		{"m-sct splits when memory forces it", "m-sct", tight, small, map[string]int{"a": 0, "b": 1}, 2 + 8/giga},
		{"heft splits when memory forces it", "heft", tight, small, map[string]int{"a": 0, "b": 1}, 2 + 8/giga},
		{"expert splits when memory forces it", "expert", tight, small, map[string]int{"a": 0, "b": 1}, 2 + 8/giga},
		{"ilp splits when memory forces it", "ilp", tight, small, map[string]int{"a": 0, "b": 1}, 2 + 8/giga},
		// Heterogeneous speeds: HEFT runs the chain on the 4x device (0.75 s).
		{"heft picks the fast device", "heft", chain3, graphtest.Cluster(giga, 0, dev(giga, 1<<40), dev(4*giga, 1<<40)), map[string]int{"a": 1, "b": 1, "c": 1}, 0.75},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			b := tc.build()
			p := problem(t, b, tc.cluster)
			got, err := newPlacer(t, tc.placer).Place(context.Background(), p)
			if err != nil {
				t.Fatal(err)
			}
			checkPlacement(t, p, b, got, tc.devices, tc.step)
		})
	}
}

// noFastB is Roofline except that op "b" cannot run on the 4 GFLOP/s type.
type noFastB struct{ cost.Roofline }

func (m noFastB) OpTime(g *graph.Graph, op graph.OpID, dt *cluster.DeviceType) float64 {
	if g.Ops[op].Name == "b" && dt.PeakFLOPS[graph.Float32] == 4*giga {
		return math.Inf(1)
	}
	return m.Roofline.OpTime(g, op, dt)
}

// TestConstraintsEveryPlacer checks that no placer puts an op where its
// device type cannot run it, splits a colocation group or ignores a pin,
// and that every placement fits memory.
func TestConstraintsEveryPlacer(t *testing.T) {
	fast := graphtest.Cluster(giga, 1e-5, dev(giga, 1<<40), dev(4*giga, 1<<40), dev(giga, 1<<40))
	build := func() *graphtest.Builder {
		b := graphtest.New("c").Input("x", 8)
		for _, n := range []string{"a", "b", "c", "d", "e"} {
			b.Op(n, 2e9, 1e3, "x")
		}
		return b.Op("f", 1e9, 8, "a", "b", "c", "d", "e")
	}
	for _, name := range placer.Names() {
		t.Run(name, func(t *testing.T) {
			b := build()
			ids := map[string]graph.OpID{}
			for _, n := range []string{"a", "b", "c", "d", "e", "f"} {
				ids[n], _ = b.G.OpByName(n)
			}
			b.G.Ops[ids["c"]].Colocate, b.G.Ops[ids["d"]].Colocate = "grp", "grp"
			b.G.Ops[ids["e"]].Device = "d2"
			p, err := placer.NewProblem(b.G, cost.NewTable(b.G, fast, noFastB{cost.Roofline{ComputeEfficiency: 1, MemoryEfficiency: 1}}))
			if err != nil {
				t.Fatal(err)
			}
			got, err := newPlacer(t, name).Place(context.Background(), p)
			if err != nil {
				t.Fatal(err)
			}
			if got.Device[ids["b"]] == 1 {
				t.Error("b placed on the device type that cannot run it")
			}
			if got.Device[ids["c"]] != got.Device[ids["d"]] {
				t.Errorf("colocated c, d on %d and %d", got.Device[ids["c"]], got.Device[ids["d"]])
			}
			if got.Device[ids["e"]] != 2 {
				t.Errorf("e pinned to d2 placed on %d", got.Device[ids["e"]])
			}
			res, err := p.Simulate(got)
			if err != nil {
				t.Fatal(err)
			}
			if !p.Fits(res) {
				t.Errorf("exceeds memory: %v", res.PeakMemory)
			}
		})
	}
}

// TestNoDeviceCanRun: an op no device type runs is infeasible, named.
func TestNoDeviceCanRun(t *testing.T) {
	b := graphtest.New("x").Input("x", 8).Op("b", 1e9, 8, "x")
	c := graphtest.Cluster(giga, 0, dev(4*giga, 1<<40))
	p, err := placer.NewProblem(b.G, cost.NewTable(b.G, c, noFastB{cost.Roofline{ComputeEfficiency: 1, MemoryEfficiency: 1}}))
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range placer.Names() {
		if _, err := newPlacer(t, name).Place(context.Background(), p); err == nil {
			t.Errorf("%s placed an op no device can run", name)
		}
	}
}

// TestDeterministicLayered repeats every placer on a layered DAG.
func TestDeterministicLayered(t *testing.T) {
	c := graphtest.Cluster(giga, 1e-5, dev(giga, 1<<40), dev(giga, 1<<40), dev(2*giga, 1<<40), dev(giga, 1<<40))
	for _, name := range placer.Names() {
		var first []int
		for i := 0; i < 3; i++ {
			p := problem(t, layered(200, 8, 1), c)
			got, err := newPlacer(t, name).Place(context.Background(), p)
			if err != nil {
				t.Fatal(err)
			}
			if i == 0 {
				first = got.Device
			} else if !reflect.DeepEqual(first, got.Device) {
				t.Fatalf("%s: run %d placed differently", name, i)
			}
		}
	}
}

func TestGroupCounts(t *testing.T) {
	// x -> a -> b -> c and a -> d: b joins c (single consumer); a has two
	// consumers; d is a sink. c and d colocated: d joins c's group too,
	// since no path links them.
	b := graphtest.New("g").Input("x", 8).Op("a", 1, 8, "x").Op("b", 1, 8, "a").Op("c", 1, 8, "b").Op("d", 1, 8, "a")
	cid, _ := b.G.OpByName("c")
	did, _ := b.G.OpByName("d")
	b.G.Ops[cid].Colocate, b.G.Ops[did].Colocate = "k", "k"
	p := problem(t, b, twoFast)
	gs, err := placer.Group(p)
	if err != nil {
		t.Fatal(err)
	}
	if gs.Len() != 2 || gs.Colocated != 1 || gs.CoPlaced != 1 {
		t.Fatalf("got %v", gs)
	}
	// A forward op and its "gradient" colocated across a path stay apart.
	b = graphtest.New("g").Input("x", 8).Op("f", 1, 8, "x").Op("g1", 1, 8, "f").Op("h", 1, 8, "g1", "x").Op("gf", 1, 8, "h", "f")
	fid, _ := b.G.OpByName("f")
	gfid, _ := b.G.OpByName("gf")
	b.G.Ops[fid].Colocate, b.G.Ops[gfid].Colocate = "k", "k"
	gs, err = placer.Group(problem(t, b, twoFast))
	if err != nil {
		t.Fatal(err)
	}
	if gs.Kept != 1 || gs.Colocated != 0 {
		t.Fatalf("got %v", gs)
	}
}
