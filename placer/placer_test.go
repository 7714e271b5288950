package placer_test

import (
	"context"
	"errors"
	"math"
	"reflect"
	"strings"
	"testing"

	"github.com/opplace/opplace/cluster"
	"github.com/opplace/opplace/cost"
	"github.com/opplace/opplace/graph/graphtest"
	"github.com/opplace/opplace/placer"
	"github.com/opplace/opplace/sim"
)

const giga = 1e9

func problem(t testing.TB, b *graphtest.Builder, c *cluster.Cluster) *placer.Problem {
	t.Helper()
	p, err := placer.NewProblem(b.G, cost.NewTable(b.G, c, cost.Roofline{ComputeEfficiency: 1, MemoryEfficiency: 1}))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// checkPlacement asserts where the named ops went, the placement's
// simulated step, and that it fits in memory.
func checkPlacement(t *testing.T, p *placer.Problem, b *graphtest.Builder, got sim.Placement, devices map[string]int, step float64) {
	t.Helper()
	for name, want := range devices {
		id, _ := b.G.OpByName(name)
		if got.Device[id] != want {
			t.Errorf("op %s on device %d, want %d", name, got.Device[id], want)
		}
	}
	res, err := p.Simulate(got)
	if err != nil {
		t.Fatal(err)
	}
	if math.Abs(res.Step-step) > 1e-9 {
		t.Errorf("step = %.12g, want %.12g", res.Step, step)
	}
	if !p.Fits(res) {
		t.Errorf("placement exceeds memory: peaks %v", res.PeakMemory)
	}
}

func dev(flops float64, mem int64) graphtest.Device {
	return graphtest.Device{FLOPS: flops, Memory: mem}
}

// TestPlacersOnHandSolvedGraphs checks each placer's devices and simulated
// step against placements worked out by hand.
func TestPlacersOnHandSolvedGraphs(t *testing.T) {
	twoFast := graphtest.Cluster(giga, 0, dev(giga, 1<<40), dev(giga, 1<<40))
	tests := []struct {
		name    string
		placer  string
		build   func() *graphtest.Builder
		cluster *cluster.Cluster
		devices map[string]int
		step    float64
	}{{
		name:   "m-etf runs independent branches in parallel",
		placer: "m-etf",
		build: func() *graphtest.Builder {
			return graphtest.New("par").Input("x", 8).Op("a", 2e9, 8, "x").Op("b", 2e9, 8, "x")
		},
		cluster: twoFast,
		devices: map[string]int{"a": 0, "b": 1},
		step:    2,
	}, {
		name:   "m-etf keeps a chain together when transfers cost more than they save",
		placer: "m-etf",
		build: func() *graphtest.Builder {
			return graphtest.New("chain").Input("x", 8).Op("a", 1e9, 4e9, "x").Op("b", 1e9, 4e9, "a").Op("c", 1e9, 8, "b")
		},
		cluster: twoFast,
		devices: map[string]int{"a": 0, "b": 0, "c": 0},
		step:    3,
	}, {
		name:   "m-etf splits a chain whose parameters do not fit one device",
		placer: "m-etf",
		build: func() *graphtest.Builder {
			return graphtest.New("mem").Input("x", 8).Param("w1", 600).Param("w2", 600).
				Op("a", 1e9, 8, "x", "w1").Op("b", 1e9, 8, "a", "w2")
		},
		cluster: graphtest.Cluster(giga, 0, dev(giga, 1000), dev(giga, 1000)),
		devices: map[string]int{"a": 0, "b": 1},
		step:    2 + 8/giga,
	}, {
		name:   "single picks the fastest device type",
		placer: "single",
		build: func() *graphtest.Builder {
			return graphtest.New("chain").Input("x", 8).Op("a", 4e9, 8, "x").Op("b", 4e9, 8, "a")
		},
		cluster: graphtest.Cluster(giga, 0, dev(giga, 1<<40), dev(4*giga, 1<<40)),
		devices: map[string]int{"a": 1, "b": 1},
		step:    2,
	}, {
		name:   "single skips a fast device the graph does not fit",
		placer: "single",
		build: func() *graphtest.Builder {
			return graphtest.New("big").Input("x", 8).Param("w", 5000).Op("a", 4e9, 8, "x", "w")
		},
		cluster: graphtest.Cluster(giga, 0, dev(giga, 1<<40), dev(4*giga, 1000)),
		devices: map[string]int{"a": 0},
		step:    4,
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			b := tc.build()
			p := problem(t, b, tc.cluster)
			pl, err := placer.New(tc.placer)
			if err != nil {
				t.Fatal(err)
			}
			got, err := pl.Place(context.Background(), p)
			if err != nil {
				t.Fatal(err)
			}
			checkPlacement(t, p, b, got, tc.devices, tc.step)
		})
	}
}

func TestInfeasible(t *testing.T) {
	b := graphtest.New("huge").Input("x", 8).Param("w", 5000).Op("a", 1e9, 8, "x", "w")
	p := problem(t, b, graphtest.Cluster(giga, 0, dev(giga, 1000), dev(giga, 1000)))
	for _, name := range placer.Names() {
		pl, _ := placer.New(name)
		_, err := pl.Place(context.Background(), p)
		var inf *placer.InfeasibleError
		if !errors.As(err, &inf) {
			t.Fatalf("%s: got %v, want an InfeasibleError", name, err)
		}
		if inf.Need < 5000 || inf.Have != 2000 || inf.LargestOp != "a" || inf.LargestDevice != 1000 {
			t.Errorf("%s: %+v", name, inf)
		}
	}
}

func TestDeterministic(t *testing.T) {
	build := func() *graphtest.Builder {
		b := graphtest.New("wide").Input("x", 8)
		for i := 0; i < 40; i++ {
			name := string(rune('A'+i%26)) + string(rune('a'+i/26))
			b.Op(name, int64(1e9+i*1e7), 1e6, "x")
		}
		return b
	}
	c := graphtest.Cluster(giga, 1e-5, dev(giga, 1<<40), dev(giga, 1<<40), dev(2*giga, 1<<40))
	for _, name := range placer.Names() {
		var first []int
		for i := 0; i < 5; i++ {
			p := problem(t, build(), c)
			pl, _ := placer.New(name)
			got, err := pl.Place(context.Background(), p)
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

// TestUnknownPlacer: the registry names what it holds (a placer, not a
// strategy) in its error.
func TestUnknownPlacer(t *testing.T) {
	if _, err := placer.New("nope"); err == nil || !strings.Contains(err.Error(), `unknown placer "nope" (known: [`) {
		t.Errorf("an unknown placer: %v", err)
	}
}
