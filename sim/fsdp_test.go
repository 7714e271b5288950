package sim_test

import (
	"fmt"
	"testing"

	"github.com/opplace/opplace/graph"
	"github.com/opplace/opplace/graph/graphtest"
	"github.com/opplace/opplace/sim"
)

// TestZeRO3Collectives: a fully sharded replica gathers the weight before
// its forward pass, reduce-scatters the gradient after its backward pass
// and runs 1/r of the update; nothing is gathered after the update. The
// backward op here does not read the weight, so only the forward
// gathers.
func TestZeRO3Collectives(t *testing.T) {
	const p = 4e8
	c := graphtest.Cluster(giga, 0, devices(4, 1<<40)...)
	b := dpGraph(p)
	b.G.Ops[2].Work.FLOPs = 4e9
	plan := &sim.Plan{Placement: sim.Placement{Device: []int{0, 0, 0}},
		Stages: []sim.Stage{{Replicas: [][]int{{0}, {1}, {2}, {3}}, Sharding: sim.ZeRO3}}}
	res := runPlan(t, b.G, c, plan)
	phase := 3.0 / 4 * p / giga
	var kinds []sim.CollectiveKind
	for _, col := range res.Collectives {
		kinds = append(kinds, col.Kind)
	}
	if fmt.Sprint(kinds) != fmt.Sprint([]sim.CollectiveKind{sim.AllGather, sim.ReduceScatter}) {
		t.Fatalf("collectives %v, want an all-gather and a reduce-scatter", kinds)
	}
	// The gather, forward 2/4 s, backward 4/4 s, the reduce-scatter, a
	// quarter of the 4 s update.
	if want := phase + 0.5 + 1 + phase + 1; !near(res.Step, want) {
		t.Errorf("step %g, want %g", res.Step, want)
	}
	// Resident: a quarter of the weight.
	if got, want := res.ResidentMemory[0], int64(p/4); got != want {
		t.Errorf("resident %d bytes, want %d", got, want)
	}
	// The forward's first run copies the gathered weight out of the
	// all-gather's buffer: a read and a write at the memory bandwidth.
	for i := range c.Devices {
		c.Devices[i].Type.MemoryBandwidth = 4 * giga
	}
	slow := runPlan(t, b.G, c, plan)
	if got, want := slow.Step-res.Step, 2*p/(4*giga); !near(got, want) {
		t.Errorf("the copy-out adds %g s, want %g", got, want)
	}
}

// moduleChain is the Adam training step of n layers "/l<i>/mm" in a
// chain, each with a float32 weight of psi elements, so each layer is a
// module (graph.ModuleKeys) and a unit of ZeRO-3.
func moduleChain(t *testing.T, n int, psi int64) *graph.Graph {
	t.Helper()
	b := graphtest.New("chain").Input("x", 1)
	prev := "x"
	for i := 0; i < n; i++ {
		w := fmt.Sprintf("w%d", i)
		name := fmt.Sprintf("/l%d/mm", i)
		b.Param(w, psi).Op(name, 1e9, 1, prev, w)
		prev = name
	}
	b.Output(prev)
	return adamStep(t, b)
}

// TestZeRO3Memory checks a fully sharded replica's memory: it keeps 1/r
// of every weight, gradient and moment (16Ψ/r with fp32 Adam), and while
// the step runs at most two layers' weights gathered whole (the one
// computing and the one prefetched) and the gradients of the layers
// whose backward pass has not been reduce-scattered yet. The
// collectives: per micro-batch, each layer gathered before its forward
// and its backward pass and reduce-scattered after the backward.
func TestZeRO3Memory(t *testing.T) {
	const n, psi = 10, 1000
	const w = 4 * psi
	g := moduleChain(t, n, psi)
	for _, r := range []int{2, 4} {
		for _, M := range []int{1, 2} {
			c := graphtest.Cluster(1e12, 0, devices(r, 1<<40)...)
			pl := replicated(g, r, sim.ZeRO3)
			pl.MicroBatches = M
			res := runPlan(t, g, c, pl)
			if got, want := res.ResidentMemory[0], int64(n*w/r+n*2*w/r); got != want {
				t.Errorf("r=%d M=%d: resident %d bytes, want %d", r, M, got, want)
			}
			count := map[sim.CollectiveKind]int{}
			for _, col := range res.Collectives {
				count[col.Kind]++
				if col.Bytes != w {
					t.Errorf("r=%d M=%d: %s of %d bytes, want one layer's %d", r, M, col.Kind, col.Bytes, w)
				}
			}
			if count[sim.AllGather] != 2*n*M || count[sim.ReduceScatter] != n*M || len(count) != 2 {
				t.Errorf("r=%d M=%d: collectives %v, want %d all-gathers and %d reduce-scatters", r, M, count, 2*n*M, n*M)
			}
			// Beyond the shards of weights, moments and gradients, at
			// most: the layer running its backward pass (its weight and
			// gradient whole), the one prefetched (its weight), the one
			// being reduce-scattered (its gradient), and a few
			// activations.
			shards := int64(n * 4 * w / r)
			extra := res.PeakMemory[0] - shards
			if limit := int64(4*(w-w/r) + 64); extra < 0 || extra > limit {
				t.Errorf("r=%d M=%d: peak %d is %d bytes above the shards, want at most %d", r, M, res.PeakMemory[0], extra, limit)
			}
			ddp := runPlan(t, g, c, replicated(g, r, sim.ZeRO2))
			if res.PeakMemory[0] >= ddp.PeakMemory[0] {
				t.Errorf("r=%d M=%d: ZeRO-3 peak %d, not below ZeRO-2's %d", r, M, res.PeakMemory[0], ddp.PeakMemory[0])
			}
			t.Logf("r=%d M=%d: peak %d (ZeRO-2 %d), step %g", r, M, res.PeakMemory[0], ddp.PeakMemory[0], res.Step)
		}
	}
}
