package placer_test

import (
	"context"
	"fmt"
	"testing"

	"github.com/opplace/opplace/cluster"
	"github.com/opplace/opplace/graph"
	"github.com/opplace/opplace/graph/graphtest"
)

// trainChain builds one training step of a chain of layers the way
// package train does, by hand so every cost is exact: per layer k a
// forward op fk (1 s on a 1 GFLOP/s device, act-byte output) reading
// f(k-1) and weight wk; a backward op bk (1 s) passing the activation
// gradient on (none for layer 0, whose input needs none); a backward op
// gk (1 s) producing wk's gradient (param bytes); and an update uk (0 s)
// reading wk, gk and the optimizer state sk (state bytes). The four ops
// of a layer share the colocation group "Lk".
func trainChain(layers int, act, param, state int64) *graphtest.Builder {
	b := graphtest.New("train").Input("x", act)
	in := func(k int) string {
		if k == 0 {
			return "x"
		}
		return fmt.Sprint("f", k-1)
	}
	// gradIn is what flows back into layer k: the next layer's activation
	// gradient, or for the last layer its own output.
	gradIn := func(k int) string {
		if k == layers-1 {
			return fmt.Sprint("f", k)
		}
		return fmt.Sprint("b", k+1)
	}
	for k := 0; k < layers; k++ {
		b.Param(fmt.Sprint("w", k), param).Param(fmt.Sprint("s", k), state)
		b.Op(fmt.Sprint("f", k), 1e9, act, in(k), fmt.Sprint("w", k))
	}
	for k := layers - 1; k >= 0; k-- {
		if k > 0 {
			b.Op(fmt.Sprint("b", k), 1e9, act, gradIn(k), in(k), fmt.Sprint("w", k))
		}
		b.Op(fmt.Sprint("g", k), 1e9, param, gradIn(k), in(k))
	}
	for k := 0; k < layers; k++ {
		b.Op(fmt.Sprint("u", k), 0, 0, fmt.Sprint("w", k), fmt.Sprint("g", k), fmt.Sprint("s", k))
	}
	for i := range b.G.Ops {
		op := &b.G.Ops[i]
		op.Colocate = "L" + op.Name[1:]
		switch op.Name[0] {
		case 'b', 'g':
			op.Phase = graph.Backward
		case 'u':
			op.Phase = graph.Update
		}
	}
	return b
}

// TestTrainingGroups checks placements of a training step worked out by
// hand. Transfers move 8 bytes at 1 GB/s: 8 ns.
func TestTrainingGroups(t *testing.T) {
	const hop = 8 / giga
	tests := []struct {
		name    string
		placer  string
		cluster *cluster.Cluster
		devices map[string]int
		step    float64
	}{{
		// 1000-byte devices; a layer keeps 100 B of weight, 100 B of
		// optimizer state and 100 B of weight gradient. Without the
		// group's reservation m-ETF put all four forward ops on d0 (432 B)
		// and then failed at the third update. With it d0 takes three
		// layers (900 B reserved or held plus activations) and the fourth
		// goes to d1. d0: f0-f2 [0, 3]; d1: f3 [3+hop, 4+hop], b3, g3
		// [.., 6+hop]; b3's gradient reaches d0 at 5+2hop: b2, g2, b1, g1,
		// g0 run back to back, 5 s.
		name:    "m-etf reserves a layer's state and gradient with its forward op",
		placer:  "m-etf",
		cluster: graphtest.Cluster(giga, 0, dev(giga, 1000), dev(giga, 1000)),
		devices: map[string]int{"f0": 0, "f1": 0, "f2": 0, "f3": 1, "b3": 1, "g3": 1, "u3": 1, "u0": 0, "g2": 0},
		step:    10 + 2*hop,
	}, {
		// Expert cuts by each layer's whole compute (3 s), not by its
		// forward op alone (1 s, which put f0-f2 on d0 and f3 on d1 and
		// left d2 and d3 idle): layer k on dk. Forward: 4 s and three
		// hops; then b3 [4+3hop, 5+3hop] on d3, b2 on d2 from 5+4hop,
		// b1 on d1 from 6+5hop, and d0 runs g0 from 7+6hop: 8+6hop.
		name:    "expert gives each device one layer with its gradient and update",
		placer:  "expert",
		cluster: graphtest.Cluster(giga, 0, dev(giga, 1<<40), dev(giga, 1<<40), dev(giga, 1<<40), dev(giga, 1<<40)),
		devices: map[string]int{"f0": 0, "g0": 0, "u0": 0, "f1": 1, "b1": 1, "f2": 2, "g2": 2, "f3": 3, "b3": 3, "u3": 3},
		step:    8 + 6*hop,
	}}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			b := trainChain(4, 8, 100, 100)
			p := problem(t, b, tc.cluster)
			got, err := newPlacer(t, tc.placer).Place(context.Background(), p)
			if err != nil {
				t.Fatal(err)
			}
			checkPlacement(t, p, b, got, tc.devices, tc.step)
		})
	}
}

// TestTrainingFitsEveryPlacer: on devices that hold three of eight
// layers, every list-scheduling strategy finds a placement the simulator
// says fits, with each layer's ops together; single cannot. (ilp is left
// out: its coarsening cuts the forward and backward passes into separate
// runs that colocation then chains onto one device; see placers.md.)
func TestTrainingFitsEveryPlacer(t *testing.T) {
	c := graphtest.Cluster(giga, 1e-6, dev(giga, 1000), dev(giga, 1000), dev(giga, 1000), dev(giga, 1000))
	for _, name := range []string{"expert", "heft", "m-etf", "m-sct", "m-topo", "single"} {
		t.Run(name, func(t *testing.T) {
			b := trainChain(8, 8, 100, 100)
			p := problem(t, b, c)
			got, err := newPlacer(t, name).Place(context.Background(), p)
			if name == "single" {
				if err == nil {
					t.Fatal("single placed 2.4 KB of layers on a 1000-byte device")
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			res, err := p.Simulate(got)
			if err != nil {
				t.Fatal(err)
			}
			if !p.Fits(res) {
				t.Errorf("placement exceeds memory: peaks %v", res.PeakMemory)
			}
			for i, op := range b.G.Ops {
				f, _ := b.G.OpByName("f" + op.Name[1:])
				if got.Device[i] != got.Device[f] {
					t.Errorf("%s on %d, its layer's forward op on %d", op.Name, got.Device[i], got.Device[f])
				}
			}
		})
	}
}
