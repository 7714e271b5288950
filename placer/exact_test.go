package placer_test

import (
	"context"
	"fmt"
	"math"
	"math/rand/v2"
	"testing"

	"github.com/opplace/opplace/graph"
	"github.com/opplace/opplace/graph/graphtest"
	"github.com/opplace/opplace/placer"
	"github.com/opplace/opplace/sim"
)

// gapMixes are the device mixes of the gap-to-optimum benchmark, as
// speeds in FLOP/s on graphtest devices: three equal GPUs, a GPU twice as
// fast beside two (an A100 beside V100s), and two GPUs with a CPU 15
// times slower (a V100's 15.7 TFLOP/s against a 1 TFLOP/s socket).
var gapMixes = []struct {
	name   string
	speeds []float64
}{
	{"equal", []float64{1e9, 1e9, 1e9}},
	{"mixed", []float64{2e9, 1e9, 1e9}},
	{"gpu+cpu", []float64{1e9, 1e9, 1e9 / 15}},
}

func mixCluster(speeds []float64, bw float64, mem int64) []graphtest.Device {
	var devs []graphtest.Device
	for _, f := range speeds {
		devs = append(devs, graphtest.Device{FLOPS: f, Memory: mem})
	}
	return devs
}

// TestExactMatchesBruteForce checks the branch and bound, its bounds and
// its symmetry breaking, against trying every placement of the
// colocation classes of small random training steps.
func TestExactMatchesBruteForce(t *testing.T) {
	for _, mix := range gapMixes {
		for _, bw := range []float64{1e10, 5e8} {
			for seed := uint64(1); seed <= 4; seed++ {
				t.Run(fmt.Sprintf("%s/%g/%d", mix.name, bw, seed), func(t *testing.T) {
					c := graphtest.Cluster(bw, 1e-5, mixCluster(mix.speeds, bw, 1<<40)...)
					b := graphtest.RandomDAG(rand.New(rand.NewPCG(seed, 4)), 4, true)
					p := problem(t, b, c)
					want := bruteForce(t, p)
					got, err := (&placer.Exact{}).Search(context.Background(), p)
					if err != nil {
						t.Fatal(err)
					}
					if !got.Proven {
						t.Fatalf("not proven after %d nodes", got.Nodes)
					}
					if math.Abs(got.Step-want) > 1e-12 {
						t.Errorf("exact step %.9g, brute force %.9g", got.Step, want)
					}
					res, err := p.Simulate(got.Placement)
					if err != nil {
						t.Fatal(err)
					}
					if res.Step != got.Step {
						t.Errorf("placement simulates to %g, search says %g", res.Step, got.Step)
					}
				})
			}
		}
	}
}

// bruteForce is the shortest simulated step over every device of every
// colocation class.
func bruteForce(t *testing.T, p *placer.Problem) float64 {
	t.Helper()
	classes := graph.ColocationGroups(p.Graph).Groups()
	nd := p.Costs.NumDevices()
	n := int(math.Pow(float64(nd), float64(len(classes))))
	if n > 1e5 {
		t.Fatalf("%d placements to try", n)
	}
	best := math.Inf(1)
	for k := 0; k < n; k++ {
		pl := sim.Placement{Device: make([]int, len(p.Graph.Ops))}
		code := k
		for _, cl := range classes {
			for _, op := range cl {
				pl.Device[op] = code % nd
			}
			code /= nd
		}
		res, err := p.Simulate(pl)
		if err != nil {
			t.Fatal(err)
		}
		best = min(best, res.Step)
	}
	return best
}
