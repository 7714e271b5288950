package sim_test

import (
	"math"
	"testing"

	"github.com/opplace/opplace/cluster"
	"github.com/opplace/opplace/cost"
	"github.com/opplace/opplace/graph"
	"github.com/opplace/opplace/graph/graphtest"
	"github.com/opplace/opplace/sim"
)

const giga = 1e9

func run(t *testing.T, b *graphtest.Builder, c *cluster.Cluster, placement map[string]int) *sim.Result {
	t.Helper()
	g := b.G
	adj := g.BuildAdjacency()
	order, err := g.TopoOrder(adj)
	if err != nil {
		t.Fatal(err)
	}
	tab := cost.NewTable(g, c, cost.Roofline{ComputeEfficiency: 1, MemoryEfficiency: 1})
	p := sim.Placement{Device: make([]int, len(g.Ops))}
	for name, d := range placement {
		id, ok := g.OpByName(name)
		if !ok {
			t.Fatalf("no op %q", name)
		}
		p.Device[id] = d
	}
	res, err := sim.Simulate(tab, adj, order, p)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

func near(a, b float64) bool { return math.Abs(a-b) < 1e-9 }

func opTimes(t *testing.T, g *graph.Graph, res *sim.Result, want map[string][2]float64) {
	t.Helper()
	for name, se := range want {
		id, _ := g.OpByName(name)
		if !near(res.Start[id], se[0]) || !near(res.End[id], se[1]) {
			t.Errorf("op %s ran %g..%g, want %g..%g", name, res.Start[id], res.End[id], se[0], se[1])
		}
	}
}

func TestSimulateSchedules(t *testing.T) {
	two := graphtest.Cluster(giga, 0, graphtest.Device{FLOPS: giga, Memory: 1 << 40}, graphtest.Device{FLOPS: giga, Memory: 1 << 40})
	three := graphtest.Cluster(giga, 0.5,
		graphtest.Device{FLOPS: giga, Memory: 1 << 40}, graphtest.Device{FLOPS: giga, Memory: 1 << 40}, graphtest.Device{FLOPS: giga, Memory: 1 << 40})
	tests := []struct {
		name      string
		build     func() *graphtest.Builder
		cluster   *cluster.Cluster
		place     map[string]int
		step      float64
		ops       map[string][2]float64
		transfers []sim.Transfer // Tensor is ignored; From/To/Bytes/Start/End compared
	}{{
		name: "chain on one device",
		build: func() *graphtest.Builder {
			return graphtest.New("chain").Input("x", 8).Op("a", 1e9, 8, "x").Op("b", 2e9, 8, "a").Op("c", 3e9, 8, "b")
		},
		cluster: two,
		step:    6,
		ops:     map[string][2]float64{"a": {0, 1}, "b": {1, 3}, "c": {3, 6}},
	}, {
		name: "diamond split across two devices pays two transfers",
		build: func() *graphtest.Builder {
			return graphtest.New("diamond").Input("x", 8).Op("a", 1e9, 1e9, "x").
				Op("b", 2e9, 8, "a").Op("c", 2e9, 1e9, "a").Op("d", 1e9, 8, "b", "c")
		},
		cluster: two,
		place:   map[string]int{"c": 1},
		step:    6,
		ops:     map[string][2]float64{"a": {0, 1}, "b": {1, 3}, "c": {2, 4}, "d": {5, 6}},
		transfers: []sim.Transfer{
			{From: 0, To: 1, Bytes: 1e9, Start: 1, End: 2},
			{From: 1, To: 0, Bytes: 1e9, Start: 4, End: 5},
		},
	}, {
		name: "fan-out sends serialise on the sender and include latency",
		build: func() *graphtest.Builder {
			return graphtest.New("fan").Input("x", 8).Op("a", 1e9, 1e9, "x").
				Op("b", 1e9, 8, "a").Op("c", 1e9, 8, "a").Op("d", 1e9, 8, "a")
		},
		cluster: three,
		place:   map[string]int{"b": 1, "c": 2},
		// a 0..1; to d1 1..2.5; to d2 2.5..4; d runs locally 1..2.
		step: 5,
		ops:  map[string][2]float64{"a": {0, 1}, "b": {2.5, 3.5}, "c": {4, 5}, "d": {1, 2}},
		transfers: []sim.Transfer{
			{From: 0, To: 1, Bytes: 1e9, Start: 1, End: 2.5},
			{From: 0, To: 2, Bytes: 1e9, Start: 2.5, End: 4},
		},
	}, {
		name: "a tensor is sent to a device once for all its consumers there",
		build: func() *graphtest.Builder {
			return graphtest.New("once").Input("x", 8).Op("a", 1e9, 1e9, "x").
				Op("b", 1e9, 8, "a").Op("c", 1e9, 8, "a")
		},
		cluster: two,
		place:   map[string]int{"b": 1, "c": 1},
		step:    4,
		ops:     map[string][2]float64{"a": {0, 1}, "b": {2, 3}, "c": {3, 4}},
		transfers: []sim.Transfer{
			{From: 0, To: 1, Bytes: 1e9, Start: 1, End: 2},
		},
	}, {
		name: "independent branches overlap on two devices",
		build: func() *graphtest.Builder {
			return graphtest.New("par").Input("x", 8).Input("y", 8).Op("a", 3e9, 8, "x").Op("b", 3e9, 8, "y")
		},
		cluster: two,
		place:   map[string]int{"b": 1},
		step:    3,
		ops:     map[string][2]float64{"a": {0, 3}, "b": {0, 3}},
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			b := tc.build()
			res := run(t, b, tc.cluster, tc.place)
			if !near(res.Step, tc.step) {
				t.Errorf("step = %g, want %g", res.Step, tc.step)
			}
			opTimes(t, b.G, res, tc.ops)
			if len(res.Transfers) != len(tc.transfers) {
				t.Fatalf("got %d transfers %+v, want %d", len(res.Transfers), res.Transfers, len(tc.transfers))
			}
			for i, want := range tc.transfers {
				got := res.Transfers[i]
				if got.From != want.From || got.To != want.To || got.Bytes != want.Bytes || !near(got.Start, want.Start) || !near(got.End, want.End) {
					t.Errorf("transfer %d = %+v, want %+v", i, got, want)
				}
			}
		})
	}
}

func TestSimulateMemory(t *testing.T) {
	// input 100 B and param 1000 B resident at 0; outputs 10, 20, 30 B.
	b := graphtest.New("mem").Input("x", 100).Param("w", 1000).
		Op("a", 1e9, 10, "x").Op("b", 1e9, 20, "a", "w").Op("c", 1e9, 30, "b").Output("c")
	c := graphtest.Cluster(giga, 0, graphtest.Device{FLOPS: giga, Memory: 1 << 40}, graphtest.Device{FLOPS: giga, Memory: 1 << 40})
	res := run(t, b, c, nil)
	// 1100 at start, +10 when a runs: the peak. Then x is freed before b allocates.
	if res.PeakMemory[0] != 1110 {
		t.Errorf("peak on d0 = %d, want 1110", res.PeakMemory[0])
	}
	if res.ResidentMemory[0] != 1000 || res.PeakMemory[1] != 0 {
		t.Errorf("resident d0 = %d (want 1000), peak d1 = %d (want 0)", res.ResidentMemory[0], res.PeakMemory[1])
	}

	// Split b onto d1: d1 holds w (1000), the received a (10) and b's output (20).
	res = run(t, b, c, map[string]int{"b": 1})
	if res.PeakMemory[1] != 1030 {
		t.Errorf("peak on d1 = %d, want 1030", res.PeakMemory[1])
	}
	if res.PeakMemory[0] != 110 {
		t.Errorf("peak on d0 = %d, want 110", res.PeakMemory[0])
	}
}

func TestSimulateRejectsBadPlacement(t *testing.T) {
	b := graphtest.New("bad").Input("x", 8).Op("a", 1, 8, "x")
	c := graphtest.Cluster(giga, 0, graphtest.Device{FLOPS: giga, Memory: 1 << 40})
	g := b.G
	adj := g.BuildAdjacency()
	order, _ := g.TopoOrder(adj)
	tab := cost.NewTable(g, c, cost.Roofline{})
	if _, err := sim.Simulate(tab, adj, order, sim.Placement{Device: []int{3}}); err == nil {
		t.Error("a device index outside the cluster was accepted")
	}
	if _, err := sim.Simulate(tab, adj, order, sim.Placement{Device: nil}); err == nil {
		t.Error("a placement missing ops was accepted")
	}
}

// fourDevices builds two hosts of two devices each; when nvlink is set the
// devices of each host also share a direct link.
func fourDevices(nvlink bool) *cluster.Cluster {
	c := graphtest.Cluster(giga, 0, graphtest.Device{FLOPS: giga, Memory: 1 << 40}, graphtest.Device{FLOPS: giga, Memory: 1 << 40},
		graphtest.Device{FLOPS: giga, Memory: 1 << 40}, graphtest.Device{FLOPS: giga, Memory: 1 << 40})
	c.Hosts = append(c.Hosts, cluster.Host{Name: "h1", Intra: c.Hosts[0].Intra})
	c.Devices[2].Host, c.Devices[3].Host = 1, 1
	c.DefaultNetwork = cluster.Link{Kind: "net", Bandwidth: giga / 2}
	if nvlink {
		c.Direct = map[[2]int]cluster.Link{{0, 1}: {Kind: "nvlink", Bandwidth: giga}, {2, 3}: {Kind: "nvlink", Bandwidth: giga}}
	}
	return c
}

func TestSimulateLinkContention(t *testing.T) {
	// Two producers each send 1 GB to a consumer on another device at t=1.
	pairs := func() *graphtest.Builder {
		return graphtest.New("pairs").Input("x", 8).
			Op("a", 1e9, 1e9, "x").Op("b", 1e9, 1e9, "x").Op("ca", 1e9, 8, "a").Op("cb", 1e9, 8, "b")
	}
	tests := []struct {
		name    string
		cluster *cluster.Cluster
		place   map[string]int
		ends    [2]float64 // when each transfer ends
	}{
		{"PCIe transfers in different hosts do not share", fourDevices(false),
			map[string]int{"a": 0, "ca": 1, "b": 2, "cb": 3}, [2]float64{2, 2}},
		{"two transfers through one host's PCIe take turns", fourDevices(false),
			map[string]int{"a": 0, "ca": 1, "b": 1, "cb": 0}, [2]float64{2, 3}},
		{"NVLink pairs do not share", fourDevices(true),
			map[string]int{"a": 0, "ca": 1, "b": 2, "cb": 3}, [2]float64{2, 2}},
		{"two transfers between hosts share the network cards", fourDevices(true),
			map[string]int{"a": 0, "ca": 2, "b": 1, "cb": 3}, [2]float64{3, 5}},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			res := run(t, pairs(), tc.cluster, tc.place)
			if len(res.Transfers) != 2 {
				t.Fatalf("transfers %+v", res.Transfers)
			}
			for i, tr := range res.Transfers {
				if !near(tr.End, tc.ends[i]) {
					t.Errorf("transfer %d (%d->%d) ends at %g, want %g", i, tr.From, tr.To, tr.End, tc.ends[i])
				}
			}
		})
	}
}
