package sim_test

import (
	"strings"
	"testing"

	"github.com/opplace/opplace/cost"
	"github.com/opplace/opplace/graph"
	"github.com/opplace/opplace/graph/graphtest"
	"github.com/opplace/opplace/sim"
	"github.com/opplace/opplace/train"
)

// mlp is x -> a(w1) -> b(w2): two 4-GFLOP layers whose weights hold w
// bytes each and whose outputs hold act bytes.
func mlp(w, act int64) *graphtest.Builder {
	return graphtest.New("mlp").Input("x", act).Param("w1", w).Param("w2", w).
		Op("a", 4e9, act, "x", "w1").Op("b", 4e9, act, "a", "w2").Output("b")
}

// megatron is the column-then-row split of mlp over a group of t: both
// layers split, both weights divided, the first layer's output divided,
// the second's a partial sum all-reduced after it.
func megatron(g *graph.Graph) *sim.TensorSplit {
	sp := &sim.TensorSplit{Split: []float32{1, 1}, Divided: make([]bool, len(g.Tensors)), Syncs: make([][]sim.Sync, 2)}
	for _, n := range []string{"w1", "w2", "a"} {
		id, _ := g.TensorByName(n)
		sp.Divided[id] = true
	}
	b, _ := g.TensorByName("b")
	sp.Syncs[1] = []sim.Sync{{Kind: sim.AllReduce, Tensor: b, Bytes: g.Tensors[b].Bytes()}}
	return sp
}

// TestTensorParallel checks a tensor-parallel stage against the model of
// docs/model.md: each member computes 1/t of a split op, the group waits
// for an op's syncs, a divided tensor takes 1/t of each member's memory,
// and every member mirrors the first.
func TestTensorParallel(t *testing.T) {
	const w, act = 1 << 20, 1e9 // act: 1 s over a 1 GB/s link
	for _, tp := range []int{2, 4} {
		b := mlp(w, act)
		g := b.G
		c := graphtest.Cluster(giga, 0, devices(tp, 1<<40)...)
		group := make([]int, tp)
		for i := range group {
			group[i] = i
		}
		plan := &sim.Plan{Placement: sim.Placement{Device: []int{0, 0}},
			Stages: []sim.Stage{{Replicas: [][]int{group}, Tensor: tp}}, Split: megatron(g)}
		res := runPlan(t, g, c, plan)
		// Each layer 4/t s; the all-reduce moves 2(t-1)/t of act.
		ar := 2 * float64(tp-1) / float64(tp) * act / giga
		if want := 8/float64(tp) + ar; !near(res.Step, want) {
			t.Errorf("t=%d: step %g s, want %g", tp, res.Step, want)
		}
		if len(res.Collectives) != 1 || res.Collectives[0].Kind != sim.AllReduce || res.Collectives[0].Bytes != act || !near(res.Collectives[0].End-res.Collectives[0].Start, ar) {
			t.Errorf("t=%d: collectives %+v, want one all-reduce of %g bytes taking %g s", tp, res.Collectives, act, ar)
		}
		if got := res.Stages[0].TensorSync; !near(got, ar) {
			t.Errorf("t=%d: stage sync time %g, want %g", tp, got, ar)
		}
		if got, want := res.ResidentMemory[0], int64(2*w/tp); got != want {
			t.Errorf("t=%d: resident %d bytes, want the weights' shards %d", tp, got, want)
		}
		for d := 1; d < tp; d++ {
			if res.PeakMemory[d] != res.PeakMemory[0] || res.Busy[d] != res.Busy[0] {
				t.Errorf("t=%d: member %d peak %d busy %g, the first %d and %g", tp, d, res.PeakMemory[d], res.Busy[d], res.PeakMemory[0], res.Busy[0])
			}
		}
		// The same plan unsplit: every member runs both layers whole.
		plan.Split = nil
		if res := runPlan(t, g, c, plan); !near(res.Step, 8) || res.ResidentMemory[0] != 2*w {
			t.Errorf("t=%d unsplit: step %g resident %d, want 8 s and %d", tp, res.Step, res.ResidentMemory[0], 2*w)
		}
	}
}

// TestTensorParallelShares: a fused kernel half split runs (1-s)+s/t of
// its work; micro-batches and replicas take their share of every sync.
func TestTensorParallelShares(t *testing.T) {
	const act = 1e9
	b := mlp(1, act)
	g := b.G
	c := graphtest.Cluster(giga, 0, devices(4, 1<<40)...)
	sp := megatron(g)
	sp.Split[0] = 0.5
	plan := &sim.Plan{Placement: sim.Placement{Device: []int{0, 0}}, MicroBatches: 2,
		Stages: []sim.Stage{{Replicas: [][]int{{0, 1}, {2, 3}}, Tensor: 2}}, Split: sp}
	res := runPlan(t, g, c, plan)
	// Per micro-batch of one replica (a quarter of the batch): layer a
	// 1 s × 3/4, layer b 1 s / 2, the all-reduce of act/4 over 2 devices;
	// the second micro-batch computes while the first's all-reduce runs.
	ar := act / 4 / giga
	if want := 2*(0.75+0.5) + ar; !near(res.Step, want) {
		t.Errorf("step %g, want %g", res.Step, want)
	}
	var n int
	for _, col := range res.Collectives {
		if col.Tensor >= 0 {
			n++
			if col.Bytes != act/4 {
				t.Errorf("sync of %d bytes, want %g", col.Bytes, act/4)
			}
		}
	}
	if n != 2 {
		t.Errorf("%d syncs, want one per micro-batch", n)
	}
	for d := 1; d < 4; d++ {
		if res.PeakMemory[d] != res.PeakMemory[0] {
			t.Errorf("device %d peak %d, device 0 %d", d, res.PeakMemory[d], res.PeakMemory[0])
		}
	}
}

// TestTensorParallelOverlap: a sync runs on the group's collective
// stream. Only the synced tensor's reader waits for it; an independent
// op computes meanwhile, as the weight gradient's GEMM runs during the
// input gradient's all-reduce in Megatron-LM's backward pass.
func TestTensorParallelOverlap(t *testing.T) {
	const act = 1e9 // 1 s over a 1 GB/s link
	for _, tc := range []struct {
		name             string
		independentFlops int64
		inner            bool
		want, exposed    float64
	}{
		// a 1 s, then b (2 s) during a's 1 s all-reduce, then c 1 s.
		{"hidden", 2e9, false, 1 + 2 + 1, 0},
		// b takes 0.5 s: c waits for the all-reduce, 0.5 s exposed.
		{"exposed", 5e8, false, 1 + 1 + 1, 0.5},
		// A sync on a tensor a computes but does not write (a fused
		// kernel's intermediate) stops a's kernel: nothing overlaps it,
		// and it counts as a's time, not as exposed.
		{"inside the kernel", 2e9, true, 1 + 1 + 2 + 1, 0},
	} {
		b := graphtest.New("overlap").Input("x", 8).
			Op("a", 1e9, act, "x").Op("b", tc.independentFlops, 8, "x").Op("c", 1e9, 8, "a", "b").Output("c")
		g := b.G
		c := graphtest.Cluster(giga, 0, devices(2, 1<<40)...)
		a, _ := g.TensorByName("a")
		sp := &sim.TensorSplit{Syncs: make([][]sim.Sync, len(g.Ops))}
		synced := a
		if tc.inner {
			synced, _ = g.TensorByName("x")
		}
		sp.Syncs[0] = []sim.Sync{{Kind: sim.AllReduce, Tensor: synced, Bytes: act}}
		plan := &sim.Plan{Placement: sim.Placement{Device: []int{0, 0, 0}, Priority: []int32{0, 1, 2}},
			Stages: []sim.Stage{{Replicas: [][]int{{0, 1}}, Tensor: 2}}, Split: sp}
		res := runPlan(t, g, c, plan)
		if !near(res.Step, tc.want) {
			t.Errorf("%s: step %g s, want %g", tc.name, res.Step, tc.want)
		}
		if got := res.Stages[0].TensorSyncExposed; !near(got, tc.exposed) {
			t.Errorf("%s: exposed sync %g s, want %g", tc.name, got, tc.exposed)
		}
		if len(res.Collectives) != 1 || !near(res.Collectives[0].Start, 1) || !near(res.Collectives[0].End, 2) {
			t.Errorf("%s: collectives %+v, want one all-reduce from 1 s to 2 s", tc.name, res.Collectives)
		}
		if cStart := res.Start[2]; cStart < 2-1e-9 || (tc.inner && !near(res.End[0], 2)) {
			t.Errorf("%s: c starts at %g s, before a's all-reduce ends", tc.name, cStart)
		}
	}
}

// TestTensorParallelInvalid: plans that break the contract are errors.
func TestTensorParallelInvalid(t *testing.T) {
	g := mlp(1, 1).G
	c := graphtest.Cluster(giga, 0, devices(4, 1<<40)...)
	adj := g.BuildAdjacency()
	order, _ := g.TopoOrder(adj)
	tab := cost.NewTable(g, c, cost.Roofline{ComputeEfficiency: 1, MemoryEfficiency: 1})
	for name, p := range map[string]*sim.Plan{
		"group size":   {Placement: sim.Placement{Device: []int{0, 0}}, Stages: []sim.Stage{{Replicas: [][]int{{0, 1, 2}}, Tensor: 2}}},
		"not on first": {Placement: sim.Placement{Device: []int{0, 1}}, Stages: []sim.Stage{{Replicas: [][]int{{0, 1}}, Tensor: 2}}},
		"short split":  {Placement: sim.Placement{Device: []int{0, 0}}, Stages: []sim.Stage{{Replicas: [][]int{{0, 1}}, Tensor: 2}}, Split: &sim.TensorSplit{Split: []float32{1}}},
		"share":        {Placement: sim.Placement{Device: []int{0, 0}}, Stages: []sim.Stage{{Replicas: [][]int{{0, 1}}, Tensor: 2}}, Split: &sim.TensorSplit{Split: []float32{2, 0}}},
		"sync kind":    {Placement: sim.Placement{Device: []int{0, 0}}, Stages: []sim.Stage{{Replicas: [][]int{{0, 1}}, Tensor: 2}}, Split: &sim.TensorSplit{Syncs: [][]sim.Sync{{{Kind: "broadcast"}}, nil}}},
	} {
		if _, err := sim.Run(tab, adj, order, p); err == nil {
			t.Errorf("%s: no error", name)
		}
	}
}

// TestTensorParallelReplicas: the replicas of a tensor-parallel stage
// all-reduce the gradients of divided weights, each member its shard.
func TestTensorParallelReplicas(t *testing.T) {
	const w = 1 << 20
	b := mlp(w, 1000)
	for i := range b.G.Tensors {
		b.G.Tensors[i].DType = graph.Float32
	}
	g, _, err := train.Build(b.G, train.Options{Optimizer: train.Adam})
	if err != nil {
		t.Fatal(err)
	}
	sp := &sim.TensorSplit{Split: make([]float32, len(g.Ops)), Divided: make([]bool, len(g.Tensors))}
	for i := range g.Tensors {
		// The weights, their gradients and their Adam moments.
		sp.Divided[i] = strings.Contains(g.Tensors[i].Name, "w1") || strings.Contains(g.Tensors[i].Name, "w2")
	}
	for i := range sp.Split {
		sp.Split[i] = 1
	}
	c := graphtest.Cluster(giga, 0, devices(4, 1<<40)...)
	plan := &sim.Plan{Placement: sim.Placement{Device: make([]int, len(g.Ops))}, BucketBytes: 1,
		Stages: []sim.Stage{{Replicas: [][]int{{0, 1}, {2, 3}}, Tensor: 2}}, Split: sp}
	res := runPlan(t, g, c, plan)
	var buckets int
	for _, col := range res.Collectives {
		if col.Tensor < 0 {
			buckets++
			// A float32 weight of w bytes... w elements: 4w bytes, half
			// on each member.
			if col.Bytes != 4*w/2 || len(col.Devices) != 2 || col.Devices[0] != 0 || col.Devices[1] != 2 {
				t.Errorf("bucket %+v, want %d bytes over devices 0 and 2", col, 4*w/2)
			}
		}
	}
	if buckets != 2 {
		t.Errorf("%d gradient buckets, want one per weight", buckets)
	}
	// Resident: two weights and four moments, halved.
	if got, want := res.ResidentMemory[0], int64(6*4*w/2); got != want {
		t.Errorf("resident %d, want %d", got, want)
	}
	for d := 1; d < 4; d++ {
		if res.PeakMemory[d] != res.PeakMemory[0] {
			t.Errorf("device %d peak %d, device 0 %d", d, res.PeakMemory[d], res.PeakMemory[0])
		}
	}
}

// TestTensorParallelSyncOnce: a sync on a weight's gradient (one buffer
// per step, summed over the micro-batches: a token split's partial
// gradient) runs once, whole, with its op's last run; a sync on an
// activation runs once per micro-batch at its share.
func TestTensorParallelSyncOnce(t *testing.T) {
	const w, act = 1 << 20, 1 << 24
	b := mlp(w, act)
	for i := range b.G.Tensors {
		b.G.Tensors[i].DType = graph.Float32
	}
	g, _, err := train.Build(b.G, train.Options{Optimizer: train.Adam})
	if err != nil {
		t.Fatal(err)
	}
	sp := &sim.TensorSplit{Split: make([]float32, len(g.Ops)), Syncs: make([][]sim.Sync, len(g.Ops))}
	for i := range g.Ops {
		if g.Ops[i].Phase != graph.Update {
			sp.Split[i] = 1
		}
	}
	// The first layer's gradient op writes w1's gradient (partial) and
	// its input's; the second layer's output is an activation.
	ag, _ := g.OpByName("a/grad")
	var dw graph.TensorID = -1
	for _, x := range g.Ops[ag].Outputs {
		if strings.HasSuffix(g.Tensors[x].Name, "w1") {
			dw = x
		}
	}
	if dw < 0 {
		t.Fatalf("no gradient of w1 among %v", g.Ops[ag].Outputs)
	}
	bo, _ := g.OpByName("b")
	out, _ := g.TensorByName("b")
	sp.Syncs[ag] = []sim.Sync{{Kind: sim.AllReduce, Tensor: dw, Bytes: g.Tensors[dw].Bytes()}}
	sp.Syncs[bo] = []sim.Sync{{Kind: sim.AllGather, Tensor: out, Bytes: g.Tensors[out].Bytes()}}
	c := graphtest.Cluster(giga, 0, devices(2, 1<<40)...)
	const M = 4
	plan := &sim.Plan{Placement: sim.Placement{Device: make([]int, len(g.Ops))}, MicroBatches: M,
		Stages: []sim.Stage{{Replicas: [][]int{{0, 1}}, Tensor: 2}}, Split: sp}
	res := runPlan(t, g, c, plan)
	var weight, activation []sim.Collective
	for _, col := range res.Collectives {
		switch col.Tensor {
		case dw:
			weight = append(weight, col)
		case out:
			activation = append(activation, col)
		}
	}
	if len(weight) != 1 || weight[0].Bytes != g.Tensors[dw].Bytes() {
		t.Errorf("weight-gradient syncs %+v, want one of %d bytes", weight, g.Tensors[dw].Bytes())
	}
	if len(activation) != M || activation[0].Bytes != g.Tensors[out].Bytes()/M {
		t.Errorf("activation syncs %+v, want %d of %d bytes", activation, M, g.Tensors[out].Bytes()/M)
	}
}
