package placer

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/opplace/opplace/cluster"
	"github.com/opplace/opplace/cost"
	"github.com/opplace/opplace/graph"
	"github.com/opplace/opplace/graph/graphtest"
	"github.com/opplace/opplace/sim"
)

// The Baechi references' tests use devices of 1 TFLOP/s, so an op of
// 1e8 FLOPs takes 100 µs, and links of 1 GB/s without latency, so 10,000
// bytes take 10 µs, unless a test says otherwise.
const (
	us100 = 1e8
	tflop = 1e12
)

func baechiProblem(t *testing.T, b *graphtest.Builder, c *cluster.Cluster) *Problem {
	t.Helper()
	p, err := NewProblem(b.G, cost.NewTable(b.G, c, cost.Roofline{ComputeEfficiency: 1, MemoryEfficiency: 1}))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func roomy(n int) *cluster.Cluster {
	devs := make([]graphtest.Device, n)
	for i := range devs {
		devs[i] = graphtest.Device{FLOPS: tflop, Memory: 1 << 40}
	}
	return graphtest.Cluster(1e9, 0, devs...)
}

// runBaechi runs the reference scheduler (m-SCT when fav is set) and
// returns it, for its times.
func runBaechi(t *testing.T, p *Problem, fav []graph.OpID) (*baechi, sim.Placement) {
	t.Helper()
	b, err := newBaechi(p, fav)
	if err != nil {
		t.Fatal(err)
	}
	pl, err := b.run(context.Background(), "test")
	if err != nil {
		t.Fatal(err)
	}
	return b, pl
}

// expect checks each named op's device and, where given, its end in µs;
// order lists the ops in the order they must have started.
func expect(t *testing.T, g *graph.Graph, b *baechi, pl sim.Placement, devs map[string]int, ends map[string]int64, order ...string) {
	t.Helper()
	for name, want := range devs {
		id, _ := g.OpByName(name)
		if pl.Device[id] != want {
			t.Errorf("%s on d%d, want d%d", name, pl.Device[id], want)
		}
	}
	for name, want := range ends {
		id, _ := g.OpByName(name)
		if b != nil && b.end[id] != want {
			t.Errorf("%s ends at %d µs, want %d", name, b.end[id], want)
		}
	}
	for i := 1; i < len(order); i++ {
		x, _ := g.OpByName(order[i-1])
		y, _ := g.OpByName(order[i])
		if pl.Priority[x] >= pl.Priority[y] {
			t.Errorf("%s was scheduled before %s", order[i], order[i-1])
		}
	}
}

// TestBaechiETFDiamond works Baechi's m-ETF through a diamond a -> {b, c}
// -> d on two devices (times 100, 200, 100, 50 µs; a's output 20 µs to
// send, c's 10, b's 30):
//
//	t=0    a ready; both devices propose it: the lower wins, a on d0.
//	t=100  a ends: b and c ready, each at 100 on d0, at 120 on d1 (a's
//	       output sent). d0 proposes b (topological order), d1 nothing
//	       yet (120 > 100): b on d0, 100-300.
//	t=120  c can start on d1 (on d0 only at 300): c on d1, 120-220.
//	t=300  b ends, d ready: on d0 at 300 (c's output arrived at 230), on
//	       d1 at 330 (b's): d on d0, 300-350.
func TestBaechiETFDiamond(t *testing.T) {
	gb := graphtest.New("diamond").
		Op("a", us100, 20000).Op("b", 2*us100, 30000, "a").Op("c", us100, 10000, "a").Op("d", us100/2, 8, "b", "c")
	p := baechiProblem(t, gb, roomy(2))
	b, pl := runBaechi(t, p, nil)
	expect(t, gb.G, b, pl, map[string]int{"a": 0, "b": 0, "c": 1, "d": 0},
		map[string]int64{"a": 100, "b": 300, "c": 220, "d": 350}, "a", "b", "c", "d")
}

// TestBaechiETFFreeLinkEstimate: an op reading two remote tensors is
// chosen by an estimate that prices each edge against the channels as
// they are, then starts when both transfers, booked one after the other
// on its device's single channel, are done. Three devices; p and q (100
// µs, outputs of 50 µs) start on d0 and d1; at 100 their long successors
// u0 and u1 (1000 µs) take d0 and d1, so r (reading p and q) is best on
// d2, estimated at 150 (each transfer 100-150), but q's transfer waits
// for p's on d2's channel: r starts at 200 and ends at 300.
func TestBaechiETFFreeLinkEstimate(t *testing.T) {
	gb := graphtest.New("free-link").
		Op("p", us100, 50000).Op("q", us100, 50000).
		Op("u0", 10*us100, 8, "p").Op("u1", 10*us100, 8, "q").Op("r", us100, 8, "p", "q")
	p := baechiProblem(t, gb, roomy(3))
	b, pl := runBaechi(t, p, nil)
	expect(t, gb.G, b, pl, map[string]int{"p": 0, "q": 1, "u0": 0, "u1": 1, "r": 2},
		map[string]int64{"u0": 1100, "u1": 1100, "r": 300})
}

// TestBaechiColocation: a colocation group goes where its first op runs,
// and only to a device with room for the group's parameters. Devices of
// 1000 and 4000 bytes, links of 10 µs latency. Group {a, d} holds 1200
// bytes of parameters, so a, which alone fits d0, goes to d1 although d0
// ties (it would win the tie); b takes d0, c follows b (local), and d,
// ready at 200, must run on d1 once c's output arrives: 210-310.
func TestBaechiColocation(t *testing.T) {
	gb := graphtest.New("coloc").Param("w", 600).Param("v", 600).
		Op("a", us100, 8, "w").Op("b", us100, 8).Op("c", us100, 8, "b").Op("d", us100, 8, "c", "v")
	for _, n := range []string{"a", "d"} {
		id, _ := gb.G.OpByName(n)
		gb.G.Ops[id].Colocate = "g"
	}
	c := graphtest.Cluster(1e12, 10e-6, graphtest.Device{FLOPS: tflop, Memory: 1000}, graphtest.Device{FLOPS: tflop, Memory: 4000})
	p := baechiProblem(t, gb, c)
	b, pl := runBaechi(t, p, nil)
	expect(t, gb.G, b, pl, map[string]int{"a": 1, "b": 0, "c": 0, "d": 1}, map[string]int64{"c": 200, "d": 310})
}

// TestBaechiMemory: Baechi's memory check counts an op's scratch,
// outputs and (here) new parameters, but not the copies a device
// receives. Two devices of 1000 bytes; a writes 600 bytes on d0; at 100
// b (8 bytes) runs there, and c (500 bytes of parameters) no longer fits
// d0 (608 used), so it runs on d1 at 110 (a's output: 10 µs of latency).
// Baechi counts 508 bytes on d1; the simulator also counts the 600 bytes
// received, 1108 in all, so the plan does not fit.
func TestBaechiMemory(t *testing.T) {
	gb := graphtest.New("mem").Param("w", 500).
		Op("a", us100, 600).Op("b", us100, 8, "a").Op("c", us100, 8, "a", "w")
	c := graphtest.Cluster(1e12, 10e-6, graphtest.Device{FLOPS: tflop, Memory: 1000}, graphtest.Device{FLOPS: tflop, Memory: 1000})
	p := baechiProblem(t, gb, c)
	for _, name := range []string{"m-etf-baechi", "m-sct-baechi"} {
		pl, err := mustNew(t, name).Place(context.Background(), p)
		if err != nil {
			t.Fatalf("%s: %v", name, err)
		}
		expect(t, gb.G, nil, pl, map[string]int{"a": 0, "b": 0, "c": 1}, nil)
		res, err := p.Simulate(pl)
		if err != nil {
			t.Fatal(err)
		}
		if p.Fits(res) || res.PeakMemory[1] < 1108 {
			t.Errorf("%s: peaks %v; want d1 over its 1000 bytes with a's copy", name, res.PeakMemory)
		}
	}
}

func mustNew(t *testing.T, name string) Placer {
	t.Helper()
	pl, err := New(name)
	if err != nil {
		t.Fatal(err)
	}
	return pl
}

// TestBaechiInfeasible: where Baechi stops on an assertion, the
// references return an InfeasibleError saying where.
func TestBaechiInfeasible(t *testing.T) {
	one := func(mem int64) *cluster.Cluster {
		return graphtest.Cluster(1e9, 0, graphtest.Device{FLOPS: tflop, Memory: mem})
	}
	// a holds 608 bytes until b runs; b needs 508 more: Baechi ends with
	// one op scheduled (its assertion on the count).
	stuck := graphtest.New("stuck").Param("w1", 600).Param("w2", 500).
		Op("a", us100, 8, "w1").Op("b", us100, 8, "a", "w2")
	// z's 500 bytes live until h runs. At 100, a (before h in
	// topological order) runs, and its group's c, whose 600-byte output
	// does not fit beside z's, is placed with it: place_op's assertion,
	// although running h first would fit.
	group := graphtest.New("group").
		Op("z", us100, 500).Op("a", us100, 8).Op("c", us100, 600, "a").Op("h", us100, 8, "z")
	for _, n := range []string{"a", "c"} {
		id, _ := group.G.OpByName(n)
		group.G.Ops[id].Colocate = "g"
	}
	for _, tc := range []struct {
		b    *graphtest.Builder
		want string
	}{
		{stuck, `ran 1 of 2 ops, then no ready op fits a device: op "b" needs 508 B`},
		{group, `places op "a"'s colocation group on d0, where "c" needs 600 B (scratch, outputs and new parameters) and 500 B is free`},
	} {
		p := baechiProblem(t, tc.b, one(1000))
		for _, name := range []string{"m-etf-baechi", "m-sct-baechi"} {
			_, err := mustNew(t, name).Place(context.Background(), p)
			var inf *InfeasibleError
			if !errors.As(err, &inf) || !strings.Contains(inf.Detail, tc.want) {
				t.Errorf("%s on %s: got %v, want an InfeasibleError saying %q", name, tc.b.G.Name, err, tc.want)
			}
		}
		if tc.b == group {
			// A plan exists: opplace's m-etf finds it.
			if _, err := listPlacer(etf).Place(context.Background(), p); err != nil {
				t.Errorf("m-etf on %s: %v", tc.b.G.Name, err)
			}
		}
	}
}

// TestBaechiSCTWaitsForFavourite: m-SCT's awake device. Sources a (100
// µs), y (150) and X (100), and b reading a (a's output: 10 µs). The LP
// makes b a's favourite child (x_ab = 0 is the only optimum: any x > 0
// lengthens the critical path a-b). At 100, d0 is free, d1 busy until
// 150; X and b can both start on d0 now.
//
//	m-ETF: X first in topological order: X on d0; b then starts sooner
//	       on d1 (150) than on d0 (200).
//	m-SCT: d0's last op a has its favourite b ready, soonest on d0:
//	       awake. X's urgent time (its latest start, 150 on d1) has not
//	       come, so d0 runs b; X goes to d1 at 150.
func TestBaechiSCTWaitsForFavourite(t *testing.T) {
	build := func() *graphtest.Builder {
		return graphtest.New("fav").Op("a", us100, 10000).Op("y", 3*us100/2, 8).Op("X", us100, 8).Op("b", us100, 8, "a")
	}
	gb := build()
	p := baechiProblem(t, gb, roomy(2))
	b, pl := runBaechi(t, p, nil)
	expect(t, gb.G, b, pl, map[string]int{"a": 0, "y": 1, "X": 0, "b": 1}, map[string]int64{"X": 200, "b": 250}, "a", "y", "X", "b")

	s := &baechiSCT{}
	pl, err := s.Place(context.Background(), p)
	if err != nil {
		t.Fatal(err)
	}
	expect(t, gb.G, nil, pl, map[string]int{"a": 0, "y": 1, "X": 1, "b": 0}, nil, "a", "y", "b", "X")
	if len(s.Notes()) != 1 || !strings.Contains(s.Notes()[0], "1 ops have a favourite child") {
		t.Errorf("notes %q, want one favourite", s.Notes())
	}
}

// TestBaechiFavourites checks _assign_favorite_child's walk and
// refine_favorite_child_edges' rounding on given LP values. Edges 0->1,
// 0->2, 3->2, 3->4, 5->6: 0 takes 1 then 2 as favourite (the later edge
// wins), then 3 takes 2, which takes 0's favourite away; 3 keeps 2 since
// x(3->4) = 0.1000001 rounds up; x(5->6) = 0.1 rounds (0.5, half to
// even) to 0: a favourite.
func TestBaechiFavourites(t *testing.T) {
	lp := &favLP{n: 7, out: make([][]int32, 7), in: make([][]int32, 7)}
	for _, e := range [][2]graph.OpID{{0, 1}, {0, 2}, {3, 2}, {3, 4}, {5, 6}} {
		id := int32(len(lp.edges))
		lp.edges = append(lp.edges, favLPEdge{from: e[0], to: e[1]})
		lp.out[e[0]] = append(lp.out[e[0]], id)
		lp.in[e[1]] = append(lp.in[e[1]], id)
	}
	got := lp.favourites([]float64{0, 0.05, 0, 0.1000001, 0.1}, BaechiSCTThreshold)
	if want := []graph.OpID{-1, -1, -1, 2, -1, 6, -1}; !slices.Equal(got, want) {
		t.Errorf("favourites %v, want %v", got, want)
	}
}

// TestBaechiLP: on a fork a -> {b, c} the LP splits x between the two
// edges (x = 1/2 each halves the transfer on the critical path), so no
// favourite; on a chain every edge is one.
func TestBaechiLP(t *testing.T) {
	for _, tc := range []struct {
		b    *graphtest.Builder
		want []graph.OpID
	}{
		{graphtest.New("fork").Op("a", us100, 10000).Op("b", us100, 8, "a").Op("c", us100, 8, "a"), []graph.OpID{-1, -1, -1}},
		{graphtest.New("chain").Op("a", us100, 10000).Op("b", us100, 10000, "a").Op("c", us100, 8, "b"), []graph.OpID{1, 2, -1}},
	} {
		p := baechiProblem(t, tc.b, roomy(2))
		b, err := newBaechi(p, nil)
		if err != nil {
			t.Fatal(err)
		}
		lp := baechiLP(b)
		x, err := lp.solve()
		if err != nil {
			t.Fatal(err)
		}
		if got := lp.favourites(x, BaechiSCTThreshold); !slices.Equal(got, tc.want) {
			t.Errorf("%s: favourites %v (x %v), want %v", tc.b.G.Name, got, x, tc.want)
		}
	}
}

// TestBaechiSCTColumnLimit: past MaxSCTColumns the reference fails, not
// an InfeasibleError and no quiet m-ETF, so it is never measured as
// m-SCT when it is not.
func TestBaechiSCTColumnLimit(t *testing.T) {
	defer func(n int) { MaxSCTColumns = n }(MaxSCTColumns)
	MaxSCTColumns = 6 // the chain's LP has 2 edges + 3 ops + 1 columns: 6 fits, 5 does not
	gb := graphtest.New("chain").Op("a", us100, 8).Op("b", us100, 8, "a").Op("c", us100, 8, "b")
	p := baechiProblem(t, gb, roomy(2))
	if _, err := (&baechiSCT{}).Place(context.Background(), p); err != nil {
		t.Fatalf("at the limit: %v", err)
	}
	MaxSCTColumns = 5
	_, err := (&baechiSCT{}).Place(context.Background(), p)
	var inf *InfeasibleError
	if err == nil || errors.As(err, &inf) || !strings.Contains(err.Error(), "6 columns") {
		t.Errorf("over the limit: got %v, want an error naming the LP's 6 columns", err)
	}
}
