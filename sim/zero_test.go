package sim_test

import (
	"fmt"
	"testing"

	"github.com/opplace/opplace/graph"
	"github.com/opplace/opplace/graph/graphtest"
	"github.com/opplace/opplace/sim"
	"github.com/opplace/opplace/train"
)

// zeroChain is the Adam training step of x -> a(w1) -> r1 -> b(w2) -> r2
// -> c(w3): three float32 weights of psi elements each, one-element
// activations, and parameter-free ops r1, r2 of 1 GFLOP between the
// weight layers, so each weight's gradient is final (and, in buckets of
// one gradient, reduced) well before the next one is produced.
func zeroChain(t *testing.T, psi int64) *graph.Graph {
	t.Helper()
	b := graphtest.New("zero").Input("x", 1).Param("w1", psi).Param("w2", psi).Param("w3", psi).
		Op("a", 1000, 1, "x", "w1").Op("r1", 1e9, 1, "a").
		Op("b", 1000, 1, "r1", "w2").Op("r2", 1e9, 1, "b").
		Op("c", 1000, 1, "r2", "w3").Output("c")
	return adamStep(t, b)
}

// adamStep is b's graph, every tensor float32, as an Adam training step.
func adamStep(t *testing.T, b *graphtest.Builder) *graph.Graph {
	t.Helper()
	for i := range b.G.Tensors {
		b.G.Tensors[i].DType = graph.Float32
	}
	g, _, err := train.Build(b.G, train.Options{Optimizer: train.Adam})
	if err != nil {
		t.Fatal(err)
	}
	return g
}

func replicated(g *graph.Graph, r int, z sim.Sharding) *sim.Plan {
	p := &sim.Plan{Placement: sim.Placement{Device: make([]int, len(g.Ops))}, BucketBytes: 1}
	st := sim.Stage{Sharding: z}
	for k := 0; k < r; k++ {
		st.Replicas = append(st.Replicas, []int{k})
	}
	p.Stages = []sim.Stage{st}
	return p
}

// TestZeROMemory checks the memory each replica holds under DDP, ZeRO-1
// and ZeRO-2 against the accounting of docs/model.md. With float32
// parameters and Adam (two float32 moments), a model of Ψ parameters
// holds 4Ψ of weights, 4Ψ of gradients and 8Ψ of optimizer state:
// 16Ψ under DDP, 4Ψ+4Ψ+8Ψ/r under ZeRO-1 and 4Ψ+(4+8)Ψ/r under ZeRO-2
// once its gradients are reduced (the paper's 2Ψ+2Ψ+KΨ, 2Ψ+2Ψ+KΨ/Nd and
// 2Ψ+(2+K)Ψ/Nd with opplace's fp32 constants: 4-byte weights and
// gradients, K = 8 for the two moments, since the float32 weight is
// itself the master copy).
func TestZeROMemory(t *testing.T) {
	const psi = 1000  // elements per weight
	const w = 4 * psi // bytes of one weight, of its gradient, of one moment
	g := zeroChain(t, psi)
	for _, r := range []int{2, 4} {
		c := graphtest.Cluster(1e18, 0, devices(r, 1<<40)...)
		peak := map[sim.Sharding]int64{}
		for _, z := range []sim.Sharding{sim.NoSharding, sim.ZeRO1, sim.ZeRO2} {
			res := runPlan(t, g, c, replicated(g, r, z))
			// Resident: three weights and their two moments, the moments
			// sharded over r replicas under ZeRO.
			state := int64(3 * 2 * w)
			if z >= sim.ZeRO1 {
				state /= int64(r)
			}
			if got, want := res.ResidentMemory[0], 3*w+state; got != want {
				t.Errorf("r=%d %v: resident %d bytes, want %d", r, z, got, want)
			}
			for d := 1; d < r; d++ {
				if res.PeakMemory[d] != res.PeakMemory[0] {
					t.Errorf("r=%d %v: replica %d peak %d, replica 0 %d", r, z, d, res.PeakMemory[d], res.PeakMemory[0])
				}
			}
			peak[z] = res.PeakMemory[0]
			t.Logf("r=%d %v: peak %d resident %d step %g collectives %d", r, z, res.PeakMemory[0], res.ResidentMemory[0], res.Step, len(res.Collectives))
		}
		// The peak is when the last weight gradient (w1's) is allocated:
		// every gradient and every moment is held. ZeRO-1 holds the
		// moments' shard; ZeRO-2 also only the shards of the two
		// gradients already reduce-scattered (w3's and w2's).
		if got, want := peak[sim.NoSharding]-peak[sim.ZeRO1], int64(3*2*w-3*2*w/r); got != want {
			t.Errorf("r=%d: ZeRO-1 saves %d bytes at the peak, want %d", r, got, want)
		}
		if got, want := peak[sim.ZeRO1]-peak[sim.ZeRO2], int64(2*(w-w/r)); got != want {
			t.Errorf("r=%d: ZeRO-2 saves %d bytes more, want %d", r, got, want)
		}
		// Absolute: 3 weights + 3 gradients + moments, plus what the
		// step holds besides at that instant (the same in all three).
		other := peak[sim.NoSharding] - (3*w + 3*w + 3*2*w)
		if other < 0 || other > 64 {
			t.Errorf("r=%d: DDP peak %d leaves %d bytes besides model states, want a few activations", r, peak[sim.NoSharding], other)
		}
		if got, want := peak[sim.ZeRO2], 3*w+(w+2*w/int64(r))+3*2*w/int64(r)+other; got != want {
			t.Errorf("r=%d: ZeRO-2 peak %d, want %d", r, got, want)
		}
	}
}

// TestZeROCollectives checks the collectives each level runs and their
// cost on one ring: ZeRO-1 all-reduces the gradient and then
// all-gathers the updated weight; ZeRO-2 reduce-scatters it instead;
// each phase moves (r-1)/r of the bytes, so an all-reduce costs exactly
// a reduce-scatter plus an all-gather. Updates take 1/r of their time.
func TestZeROCollectives(t *testing.T) {
	const p = 4e8
	const lat = 1e-3
	c := graphtest.Cluster(giga, lat, devices(4, 1<<40)...)
	devs := []int{0, 1, 2, 3}
	phase := 3.0/4*p/giga + 3*lat
	for _, k := range []sim.CollectiveKind{sim.ReduceScatter, sim.AllGather} {
		if got := sim.CollectiveTime(c, k, devs, p); !near(got, phase) {
			t.Errorf("%s: %g s, want %g", k, got, phase)
		}
	}
	if got := sim.AllReduceTime(c, devs, p); !near(got, 2*phase) {
		t.Errorf("all-reduce: %g s, want %g", got, 2*phase)
	}
	for _, tc := range []struct {
		z     sim.Sharding
		kinds []sim.CollectiveKind
	}{
		{sim.NoSharding, []sim.CollectiveKind{sim.AllReduce}},
		{sim.ZeRO1, []sim.CollectiveKind{sim.AllReduce, sim.AllGather}},
		{sim.ZeRO2, []sim.CollectiveKind{sim.ReduceScatter, sim.AllGather}},
	} {
		b := dpGraph(p)
		b.G.Ops[2].Work.FLOPs = 4e9 // the update: 4 s unsharded
		plan := &sim.Plan{Placement: sim.Placement{Device: []int{0, 0, 0}},
			Stages: []sim.Stage{{Replicas: [][]int{{0}, {1}, {2}, {3}}, Sharding: tc.z}}}
		res := runPlan(t, b.G, c, plan)
		var kinds []sim.CollectiveKind
		var comm float64
		for _, col := range res.Collectives {
			kinds = append(kinds, col.Kind)
			comm += col.End - col.Start
			if col.Bytes != p {
				t.Errorf("%v: %s of %d bytes, want %g", tc.z, col.Kind, col.Bytes, p)
			}
		}
		if fmt.Sprint(kinds) != fmt.Sprint(tc.kinds) {
			t.Errorf("%v: collectives %v, want %v", tc.z, kinds, tc.kinds)
		}
		// Forward 2/4 s, backward 4/4 s, the gradient's collective, the
		// update (4 s, or its quarter), the weight's all-gather.
		update, want := 4.0, 0.5+1+2*phase+4
		switch tc.z {
		case sim.ZeRO1:
			update, want = 1, 0.5+1+2*phase+1+phase
		case sim.ZeRO2:
			update, want = 1, 0.5+1+phase+1+phase
		}
		if !near(res.Step, want) {
			t.Errorf("%v: step %g s, want %g (collectives %g s)", tc.z, res.Step, want, comm)
		}
		if !near(res.Stages[0].Update, update) {
			t.Errorf("%v: update %g s, want %g", tc.z, res.Stages[0].Update, update)
		}
	}
}

// TestZeROAccumulates: under gradient accumulation the gradient sums over
// the micro-batches whole and is reduce-scattered once, after the last
// (docs/model.md: what is left), then the update and the all-gather.
func TestZeROAccumulates(t *testing.T) {
	const p = 4e8
	c := graphtest.Cluster(giga, 0, devices(4, 1<<40)...)
	b := dpGraph(p)
	b.G.Ops[2].Work.FLOPs = 4e9
	plan := &sim.Plan{Placement: sim.Placement{Device: []int{0, 0, 0}}, MicroBatches: 4,
		Stages: []sim.Stage{{Replicas: [][]int{{0}, {1}, {2}, {3}}, Sharding: sim.ZeRO2}}}
	res := runPlan(t, b.G, c, plan)
	phase := 3.0 / 4 * p / giga
	if len(res.Collectives) != 2 || res.Collectives[0].Kind != sim.ReduceScatter {
		t.Fatalf("collectives %+v, want one reduce-scatter and one all-gather", res.Collectives)
	}
	if want := 0.5 + 1 + phase + 1 + phase; !near(res.Step, want) {
		t.Errorf("step %g, want %g", res.Step, want)
	}
}
