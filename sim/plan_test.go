package sim_test

import (
	"math"
	"reflect"
	"strings"
	"sync"
	"testing"

	"github.com/opplace/opplace/cluster"
	"github.com/opplace/opplace/cost"
	"github.com/opplace/opplace/graph"
	"github.com/opplace/opplace/graph/graphtest"
	"github.com/opplace/opplace/sim"
)

// chain is a training chain of s forward ops of 1 GFLOP (f0..), each
// with a backward op of 2 GFLOP (b0..) reading its forward output and the
// next backward's gradient: uniform pipeline stages when cut per layer.
func chain(s int, actBytes int64) *graphtest.Builder {
	b := graphtest.New("chain").Input("x", actBytes)
	prev := "x"
	for i := 0; i < s; i++ {
		name := "f" + string(rune('0'+i))
		b.Op(name, 1e9, actBytes, prev)
		prev = name
	}
	grad := prev
	for i := s - 1; i >= 0; i-- {
		name := "b" + string(rune('0'+i))
		b.Op(name, 2e9, actBytes, grad, "f"+string(rune('0'+i)))
		grad = name
	}
	for i := s; i < 2*s; i++ {
		b.G.Ops[i].Phase = graph.Backward
	}
	return b
}

func devices(n int, memory int64) []graphtest.Device {
	out := make([]graphtest.Device, n)
	for i := range out {
		out[i] = graphtest.Device{FLOPS: giga, Memory: memory}
	}
	return out
}

func runPlan(t *testing.T, g *graph.Graph, c *cluster.Cluster, p *sim.Plan) *sim.Result {
	t.Helper()
	adj := g.BuildAdjacency()
	order, err := g.TopoOrder(adj)
	if err != nil {
		t.Fatal(err)
	}
	res, err := sim.Run(cost.NewTable(g, c, cost.Roofline{ComputeEfficiency: 1, MemoryEfficiency: 1}), adj, order, p)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// perLayer puts layer i (forward and backward) on stage and device i.
func perLayer(g *graph.Graph, s, m int, sched sim.Schedule) *sim.Plan {
	p := &sim.Plan{Placement: sim.Placement{Device: make([]int, len(g.Ops))}, OpStage: make([]int, len(g.Ops)), MicroBatches: m, Schedule: sched}
	for i := range g.Ops {
		layer := int(g.Ops[i].Name[1] - '0')
		p.Device[i], p.OpStage[i] = layer, layer
	}
	for i := 0; i < s; i++ {
		p.Stages = append(p.Stages, sim.Stage{Replicas: [][]int{{i}}})
	}
	return p
}

// TestPipelineSchedules checks the judge against the closed forms of a
// uniform pipeline with free links: a step of (M+S-1)(f+b), a bubble of
// (S-1)/(M+S-1), and 1F1B stashing min(M, S-i) micro-batches where GPipe
// stashes M.
func TestPipelineSchedules(t *testing.T) {
	for _, tc := range []struct {
		s, m  int
		sched sim.Schedule
	}{{4, 8, sim.OneFOneB}, {4, 8, sim.GPipe}, {3, 2, sim.OneFOneB}, {2, 1, sim.GPipe}, {4, 4, sim.OneFOneB}} {
		b := chain(tc.s, 1000)
		c := graphtest.Cluster(1e18, 0, devices(tc.s, 1<<40)...)
		res := runPlan(t, b.G, c, perLayer(b.G, tc.s, tc.m, tc.sched))
		f, bw := 1/float64(tc.m), 2/float64(tc.m)
		if want := float64(tc.m+tc.s-1) * (f + bw); !near(res.Step, want) {
			t.Errorf("%+v: step %g, want %g", tc, res.Step, want)
		}
		if want := float64(tc.s-1) / float64(tc.m+tc.s-1); math.Abs(res.Bubble-want) > 1e-9 {
			t.Errorf("%+v: bubble %g, want %g", tc, res.Bubble, want)
		}
		for i, st := range res.Stages {
			want := min(tc.m, tc.s-i)
			if tc.sched == sim.GPipe {
				want = tc.m
			}
			if st.AliveMicroBatches != want {
				t.Errorf("%+v: stage %d stashes %d micro-batches, want %d", tc, i, st.AliveMicroBatches, want)
			}
		}
	}
}

// TestPipelineMemoryFollowsSchedule checks that a stage's peak holds its
// alive micro-batches' activations: stage 0 of a 1F1B pipeline stashes
// fewer than under GPipe.
func TestPipelineMemoryFollowsSchedule(t *testing.T) {
	b := chain(4, 8000)
	c := graphtest.Cluster(1e18, 0, devices(4, 1<<40)...)
	one := runPlan(t, b.G, c, perLayer(b.G, 4, 8, sim.OneFOneB))
	gp := runPlan(t, b.G, c, perLayer(b.G, 4, 8, sim.GPipe))
	if one.PeakMemory[0] >= gp.PeakMemory[0] {
		t.Errorf("stage 0 peak: 1F1B %d, GPipe %d; 1F1B should stash less", one.PeakMemory[0], gp.PeakMemory[0])
	}
	// A micro-batch's activation is 1/8 of 8000 bytes.
	if gp.PeakMemory[0] < 8*1000 {
		t.Errorf("GPipe stage 0 peak %d holds fewer than 8 micro-batches of 1000 bytes", gp.PeakMemory[0])
	}
}

// dpGraph is one layer with a parameter of p bytes: forward 2 GFLOP,
// backward 4 GFLOP writing the weight gradient, and an optimizer update.
func dpGraph(p int64) *graphtest.Builder {
	b := graphtest.New("dp").Input("x", 4000).Param("w", p).
		Op("f", 2e9, 4000, "x", "w").Op("b", 4e9, p, "f").Op("u", 0, 8, "w", "b")
	b.G.Ops[1].Phase = graph.Backward
	b.G.Ops[2].Phase = graph.Update
	return b
}

func TestDataParallel(t *testing.T) {
	const p = 4e8
	b := dpGraph(p)
	c := graphtest.Cluster(giga, 0, devices(4, 1<<40)...)
	plan := &sim.Plan{Placement: sim.Placement{Device: []int{0, 0, 0}},
		Stages: []sim.Stage{{Replicas: [][]int{{0}, {1}, {2}, {3}}}}}
	res := runPlan(t, b.G, c, plan)
	// Forward 2/4 s, backward 4/4 s, then a ring all-reduce of p bytes
	// over four devices: 2·3/4·p/bandwidth.
	reduce := 2 * 3.0 / 4 * p / giga
	if want := 0.5 + 1 + reduce; !near(res.Step, want) {
		t.Errorf("step %g, want %g", res.Step, want)
	}
	if len(res.Collectives) != 1 || res.Collectives[0].Bytes != p || !near(res.Collectives[0].End-res.Collectives[0].Start, reduce) {
		t.Fatalf("collectives %+v, want one all-reduce of %g bytes taking %g s", res.Collectives, p, reduce)
	}
	if got := sim.AllReduceTime(c, []int{0, 1, 2, 3}, p); !near(got, reduce) {
		t.Errorf("AllReduceTime = %g, want %g", got, reduce)
	}
	for d := 1; d < 4; d++ {
		if res.PeakMemory[d] != res.PeakMemory[0] || res.Busy[d] != res.Busy[0] {
			t.Errorf("replica device %d: peak %d busy %g, want the first replica's %d, %g", d, res.PeakMemory[d], res.Busy[d], res.PeakMemory[0], res.Busy[0])
		}
	}
	// Each replica holds the parameter, its gradient and a quarter of
	// the batch's activations.
	if res.PeakMemory[0] < 2*p {
		t.Errorf("replica peak %d, want at least parameter + gradient %g", res.PeakMemory[0], 2*p)
	}
}

func TestGradientAccumulation(t *testing.T) {
	const p = 1000
	b := dpGraph(p)
	c := graphtest.Cluster(giga, 0, devices(2, 1<<40)...)
	plan := &sim.Plan{Placement: sim.Placement{Device: []int{0, 0, 0}}, MicroBatches: 4,
		Stages: []sim.Stage{{Replicas: [][]int{{0}, {1}}}}}
	res := runPlan(t, b.G, c, plan)
	// Four micro-batches of 1/8 of the batch each: (2+4)/2 s of compute,
	// one all-reduce of the accumulated gradient after the last.
	if len(res.Collectives) != 1 {
		t.Fatalf("%d all-reduces, want 1 (gradients accumulate over micro-batches)", len(res.Collectives))
	}
	if want := 3 + sim.AllReduceTime(c, []int{0, 1}, p); !near(res.Step, want) {
		t.Errorf("step %g, want %g", res.Step, want)
	}
	// The gradient buffer is counted once, not once per micro-batch:
	// parameter 1000 + gradient 1000 + input share 2000 + activations.
	if res.PeakMemory[0] >= 2*p+2000+4000 {
		t.Errorf("peak %d counts the gradient more than once", res.PeakMemory[0])
	}
}

func TestHierarchicalAllReduce(t *testing.T) {
	dt := &cluster.DeviceType{Name: "g", PeakFLOPS: map[graph.DType]float64{graph.Float32: 1}, MemoryBandwidth: 1}
	c := &cluster.Cluster{Name: "2x2",
		Hosts:          []cluster.Host{{Name: "a", Intra: cluster.Link{Bandwidth: 100}}, {Name: "b", Intra: cluster.Link{Bandwidth: 100}}},
		DefaultNetwork: cluster.Link{Bandwidth: 10, Latency: 1},
	}
	for i := 0; i < 4; i++ {
		c.Devices = append(c.Devices, cluster.Device{Name: string(rune('p' + i)), Type: dt, Memory: 1, Host: i / 2})
	}
	// Inside each host a ring of 2 (2·1/2·B/100), across 2 hosts
	// 2·1/2·B/10 plus 2·1 latencies.
	if got, want := sim.AllReduceTime(c, []int{0, 1, 2, 3}, 1000), 1000.0/100+1000.0/10+2; !near(got, want) {
		t.Errorf("2 hosts x 2: %g, want %g", got, want)
	}
	if got, want := sim.AllReduceTime(c, []int{0, 2}, 1000), 1000.0/10+2; !near(got, want) {
		t.Errorf("2 hosts x 1: %g, want %g", got, want)
	}
	if got := sim.AllReduceTime(c, []int{0}, 1000); got != 0 {
		t.Errorf("one device: %g, want 0", got)
	}
}

// TestSkipGoesStraight checks that a tensor skipping a stage is sent from
// its producer's stage to its consumer's, not relayed through the stage
// in between.
func TestSkipGoesStraight(t *testing.T) {
	b := graphtest.New("skip").Input("x", 8).Op("f0", 1e9, 1000, "x").Op("f1", 1e9, 1000, "f0").Op("f2", 1e9, 8, "f1", "f0")
	c := graphtest.Cluster(giga, 0, devices(3, 1<<40)...)
	res := runPlan(t, b.G, c, perLayer(b.G, 3, 2, ""))
	f0, _ := b.G.TensorByName("f0")
	var direct, relayed int
	for _, tr := range res.Transfers {
		if tr.Tensor == f0 && tr.From == 0 && tr.To == 2 {
			direct++
		}
		if tr.Tensor == f0 && tr.From == 1 {
			relayed++
		}
	}
	if direct != 2 || relayed != 0 {
		t.Errorf("f0 went straight to stage 2 %d times (want once per micro-batch, 2) and through stage 1 %d times", direct, relayed)
	}
}

// TestTiedWeightGradientOncePerStep: a parameter read in the first and
// the last stage has its last stage's gradient sent once per step, after
// the last micro-batch, to the update in the first stage.
func TestTiedWeightGradientOncePerStep(t *testing.T) {
	const p = 5000
	b := graphtest.New("tied").Input("x", 800).Param("w", p).
		Op("f0", 1e9, 800, "x", "w").Op("f1", 1e9, 800, "f0").Op("f2", 1e9, 800, "f1", "w").
		Op("b2", 2e9, 800, "f2").Op("bw2", 1e9, p, "f2").Op("b1", 2e9, 800, "b2", "f1").
		Op("bw0", 1e9, p, "b1", "f0").Op("u", 0, 8, "w", "bw0", "bw2")
	for i := 3; i < 7; i++ {
		b.G.Ops[i].Phase = graph.Backward
	}
	b.G.Ops[7].Phase = graph.Update
	stageOf := []int{0, 1, 2, 2, 2, 1, 0, 0}
	pl := &sim.Plan{Placement: sim.Placement{Device: stageOf}, OpStage: stageOf, MicroBatches: 4,
		Stages: []sim.Stage{{Replicas: [][]int{{0}}}, {Replicas: [][]int{{1}}}, {Replicas: [][]int{{2}}}}}
	c := graphtest.Cluster(giga, 0, devices(3, 1<<40)...)
	res := runPlan(t, b.G, c, pl)
	bw2, _ := b.G.TensorByName("bw2")
	f0, _ := b.G.TensorByName("f0")
	bwOp, _ := b.G.OpByName("bw2")
	var grads, acts int
	for _, tr := range res.Transfers {
		switch tr.Tensor {
		case bw2:
			grads++
			if tr.Bytes != p || tr.From != 2 || tr.To != 0 || tr.Start < res.End[bwOp] {
				t.Errorf("tied gradient transfer %+v, want %d bytes from device 2 to 0 after its last micro-batch (%g)", tr, p, res.End[bwOp])
			}
		case f0:
			acts++
		}
	}
	if grads != 1 || acts != 4 {
		t.Errorf("tied gradient sent %d times (want 1), activation f0 %d times (want once per micro-batch, 4)", grads, acts)
	}
}

func TestPlanErrors(t *testing.T) {
	b := chain(2, 100)
	c := graphtest.Cluster(giga, 0, devices(3, 1<<40)...)
	g := b.G
	adj := g.BuildAdjacency()
	order, _ := g.TopoOrder(adj)
	tab := cost.NewTable(g, c, cost.Roofline{ComputeEfficiency: 1, MemoryEfficiency: 1})
	good := func() *sim.Plan { return perLayer(g, 2, 2, "") }
	for _, tc := range []struct {
		name  string
		edit  func(*sim.Plan)
		wants string
	}{
		{"op outside its stage", func(p *sim.Plan) { p.Device[0] = 1 }, "outside the stage's first replica"},
		{"device in two stages", func(p *sim.Plan) { p.Stages[1].Replicas = append(p.Stages[1].Replicas, []int{0}) }, "two replicas or stages"},
		{"uneven replicas", func(p *sim.Plan) { p.Stages[1].Replicas = append(p.Stages[1].Replicas, []int{2, 0}) }, "replica 1 has 2 devices"},
		{"stage out of range", func(p *sim.Plan) { p.OpStage[0] = 5 }, "in stage 5"},
		{"unknown schedule", func(p *sim.Plan) { p.Schedule = "zigzag" }, "unknown pipeline schedule"},
		{"short placement", func(p *sim.Plan) { p.Device = p.Device[:1] }, "placement covers 1 ops"},
		{"no replicas", func(p *sim.Plan) { p.Stages[0].Replicas = nil }, "no replicas"},
	} {
		p := good()
		tc.edit(p)
		if _, err := sim.Run(tab, adj, order, p); err == nil || !strings.Contains(err.Error(), tc.wants) {
			t.Errorf("%s: error %v, want one containing %q", tc.name, err, tc.wants)
		}
	}
}

func TestRunDeterministic(t *testing.T) {
	b := chain(4, 3000)
	c := graphtest.Cluster(giga, 1e-6, devices(8, 1<<40)...)
	p := perLayer(b.G, 4, 4, sim.OneFOneB)
	for i := range p.Stages {
		p.Stages[i].Replicas = append(p.Stages[i].Replicas, []int{4 + i})
	}
	first := runPlan(t, b.G, c, p)
	for i := 0; i < 3; i++ {
		if again := runPlan(t, b.G, c, p); !reflect.DeepEqual(first, again) {
			t.Fatal("two runs of one plan differ")
		}
	}
}

// TestSharedWeightOneGradient: a parameter read by two ops (an unrolled
// RNN's weight, a deduplicated initializer) has one gradient buffer, so
// replicas all-reduce its bytes once.
func TestSharedWeightOneGradient(t *testing.T) {
	const p = 1 << 20
	b := graphtest.New("shared").Input("x", 4000).Param("w", p).
		Op("f1", 1e9, 4000, "x", "w").Op("f2", 1e9, 4000, "f1", "w").
		Op("b2", 2e9, 4000, "f2").Op("g2", 1e9, p, "f2").Op("g1", 1e9, p, "b2", "f1").Op("u", 0, 8, "w", "g1", "g2")
	for i := 2; i < 5; i++ {
		b.G.Ops[i].Phase = graph.Backward
	}
	b.G.Ops[5].Phase = graph.Update
	c := graphtest.Cluster(giga, 0, devices(2, 1<<40)...)
	res := runPlan(t, b.G, c, &sim.Plan{Placement: sim.Placement{Device: make([]int, 6)},
		Stages: []sim.Stage{{Replicas: [][]int{{0}, {1}}}}})
	var bytes int64
	for _, col := range res.Collectives {
		bytes += col.Bytes
	}
	if bytes != p {
		t.Errorf("all-reduced %d bytes, want the parameter's %d once", bytes, p)
	}
	// Parameter, its one gradient buffer, activations: not two buffers.
	if res.PeakMemory[0] >= 3*p {
		t.Errorf("peak %d holds the gradient twice", res.PeakMemory[0])
	}
}

// TestRecordTimeline checks the recorded timeline against the step it
// records: one run per op and micro-batch, each as long as the op's cost
// and within its first start and last end; memory samples that reach the
// device's peak, in time order, and nothing recorded unless asked.
func TestRecordTimeline(t *testing.T) {
	const s, m = 4, 8
	b := chain(s, 8000)
	c := graphtest.Cluster(1e18, 0, devices(s, 1<<40)...)
	p := perLayer(b.G, s, m, sim.OneFOneB)
	plain := runPlan(t, b.G, c, p)
	if plain.Runs != nil || plain.Memory != nil {
		t.Fatal("timeline recorded without Record")
	}
	p.Record = true
	res := runPlan(t, b.G, c, p)
	if res.Step != plain.Step || !reflect.DeepEqual(res.PeakMemory, plain.PeakMemory) {
		t.Fatalf("recording changed the step: %g vs %g", res.Step, plain.Step)
	}
	if len(res.Runs) != len(b.G.Ops)*m {
		t.Fatalf("%d runs, want %d", len(res.Runs), len(b.G.Ops)*m)
	}
	for i, r := range res.Runs {
		op, mb := i/m, i%m
		if int(r.Op) != op || r.MicroBatch != mb || r.Device != p.Device[op] {
			t.Fatalf("run %d is %+v, want op %d micro-batch %d on %d", i, r, op, mb, p.Device[op])
		}
		want := 1 / float64(m) // forward: 1 GFLOP at 1 GFLOP/s per micro-batch
		if b.G.Ops[op].Phase == graph.Backward {
			want *= 2
		}
		if !near(r.End-r.Start, want) {
			t.Errorf("run %d lasts %g, want %g", i, r.End-r.Start, want)
		}
		if r.Start < res.Start[op] || r.End > res.End[op] {
			t.Errorf("run %d [%g,%g] outside op's [%g,%g]", i, r.Start, r.End, res.Start[op], res.End[op])
		}
	}
	for d, samples := range res.Memory {
		var peak int64
		for i, x := range samples {
			if i > 0 && x.Time <= samples[i-1].Time {
				t.Fatalf("device %d: samples out of order at %d", d, i)
			}
			peak = max(peak, x.Bytes)
		}
		if peak != res.PeakMemory[d] {
			t.Errorf("device %d: timeline peaks at %d, the step at %d", d, peak, res.PeakMemory[d])
		}
	}
}

// TestSimulatorSharesFacts: one Simulator running many plans, from
// several goroutines at once, gives each plan the result a fresh sim.Run
// gives it (what the plans share is worked out once and only read).
func TestSimulatorSharesFacts(t *testing.T) {
	b := chain(4, 3000)
	c := graphtest.Cluster(giga, 1e-6, devices(8, 1<<40)...)
	var plans []*sim.Plan
	for _, m := range []int{1, 2, 4} {
		for _, sched := range []sim.Schedule{sim.GPipe, sim.OneFOneB} {
			p := perLayer(b.G, 4, m, sched)
			plans = append(plans, p)
			r := perLayer(b.G, 4, m, sched)
			for i := range r.Stages {
				r.Stages[i].Replicas = append(r.Stages[i].Replicas, []int{4 + i})
			}
			plans = append(plans, r)
		}
	}
	plans = append(plans, &sim.Plan{Placement: sim.Placement{Device: make([]int, len(b.G.Ops))}})
	want := make([]*sim.Result, len(plans))
	for i, p := range plans {
		want[i] = runPlan(t, b.G, c, p)
	}
	adj := b.G.BuildAdjacency()
	order, err := b.G.TopoOrder(adj)
	if err != nil {
		t.Fatal(err)
	}
	sm := sim.New(cost.NewTable(b.G, c, cost.Roofline{ComputeEfficiency: 1, MemoryEfficiency: 1}), adj, order)
	got := make([]*sim.Result, len(plans))
	errs := make([]error, len(plans))
	var wg sync.WaitGroup
	for round := range 3 {
		for i, p := range plans {
			wg.Add(1)
			go func() {
				defer wg.Done()
				res, err := sm.Run(p)
				if round == 2 {
					got[i], errs[i] = res, err
				}
			}()
		}
		wg.Wait()
	}
	for i := range plans {
		if errs[i] != nil {
			t.Fatalf("plan %d: %v", i, errs[i])
		}
		if !reflect.DeepEqual(got[i], want[i]) {
			t.Errorf("plan %d: the shared simulator's result differs from a fresh run's", i)
		}
	}
}
