package cost_test

import (
	"math"
	"testing"

	"github.com/opplace/opplace/cluster"
	"github.com/opplace/opplace/cost"
	"github.com/opplace/opplace/graph"
	"github.com/opplace/opplace/graph/graphtest"
)

func near(a, b float64) bool { return math.Abs(a-b) <= 1e-12*math.Max(1, math.Abs(b)) }

func TestRoofline(t *testing.T) {
	dt := &cluster.DeviceType{
		Name:            "gpu",
		PeakFLOPS:       map[graph.DType]float64{graph.Float32: 10e12, graph.Float16: 100e12},
		MemoryBandwidth: 1e12,
		LaunchOverhead:  5e-6,
	}
	g := graph.New("g", 0, 0)
	add := func(name string, dtype graph.DType, elems int64, kind graph.TensorKind) graph.TensorID {
		id, err := g.AddTensor(graph.Tensor{Name: name, DType: dtype, Shape: []int64{elems}, ShapeKnown: true, Kind: kind})
		if err != nil {
			t.Fatal(err)
		}
		return id
	}
	x := add("x", graph.Float32, 1e6, graph.Input)
	w := add("w", graph.Float32, 1e6, graph.Parameter)
	y := add("y", graph.Float32, 1e6, graph.Activation)
	h := add("h", graph.Float16, 1e6, graph.Input)
	z := add("z", graph.Float16, 1e6, graph.Activation)
	r := add("r", graph.Float32, 1e6, graph.Activation)
	mustOp := func(op graph.Op) graph.OpID {
		id, err := g.AddOp(op)
		if err != nil {
			t.Fatal(err)
		}
		return id
	}
	gemm := mustOp(graph.Op{Name: "gemm", Type: "Gemm", Inputs: []graph.TensorID{x, w}, Outputs: []graph.TensorID{y}, Work: graph.Work{FLOPs: 1e12}})
	half := mustOp(graph.Op{Name: "half", Type: "MatMul", Inputs: []graph.TensorID{h}, Outputs: []graph.TensorID{z}, Work: graph.Work{FLOPs: 1e12}})
	relu := mustOp(graph.Op{Name: "relu", Type: "Relu", Inputs: []graph.TensorID{y}, Outputs: []graph.TensorID{r}, Work: graph.Work{FLOPs: 1e6}})
	view := mustOp(graph.Op{Name: "view", Type: "Reshape", Inputs: []graph.TensorID{r}})

	m := cost.Roofline{ComputeEfficiency: 0.5, MemoryEfficiency: 0.5}
	tests := []struct {
		op   graph.OpID
		want float64
	}{
		{gemm, 1e12/(10e12*0.5) + 5e-6},  // compute-bound: 0.2 s
		{half, 1e12/(100e12*0.5) + 5e-6}, // float16 runs at the float16 peak
		{relu, 8e6/(1e12*0.5) + 5e-6},    // memory-bound: 4 MB read + 4 MB written
		{view, 0},                        // metadata: no kernel
	}
	for _, tc := range tests {
		if got := m.OpTime(g, tc.op, dt); !near(got, tc.want) {
			t.Errorf("%s: %g s, want %g s", g.Ops[tc.op].Name, got, tc.want)
		}
	}
	if d := (cost.Roofline{}); !near(d.OpTime(g, gemm, dt), 1e12/(10e12*cost.DefaultComputeEfficiency)+5e-6) {
		t.Error("zero efficiencies do not default")
	}
}

func TestLowerBound(t *testing.T) {
	// A diamond: a (2 s) -> b (4 s), c (1 s) -> d (1 s) on devices of 1 and
	// 2 GFLOP/s. Fastest times halve; critical path a-b-d = (2+4+1)/2.
	b := graphtest.New("diamond").Input("x", 8).Op("a", 2e9, 8, "x").Op("b", 4e9, 8, "a").Op("c", 1e9, 8, "a").Op("d", 1e9, 8, "b", "c")
	c := graphtest.Cluster(1e9, 0, graphtest.Device{FLOPS: 1e9, Memory: 1 << 30}, graphtest.Device{FLOPS: 2e9, Memory: 1 << 30})
	tab := cost.NewTable(b.G, c, cost.Roofline{ComputeEfficiency: 1, MemoryEfficiency: 1})
	adj := b.G.BuildAdjacency()
	order, _ := b.G.TopoOrder(adj)
	lb := cost.LowerBound(tab, adj, order)
	if !near(lb.CriticalPath, 3.5) {
		t.Errorf("critical path %g, want 3.5", lb.CriticalPath)
	}
	// Work on the fastest device: 4 s; speeds 0.5 + 1 => 8/3 s.
	if !near(lb.Throughput, 4/1.5) {
		t.Errorf("throughput bound %g, want %g", lb.Throughput, 4/1.5)
	}
	if !near(lb.Seconds(), 3.5) {
		t.Errorf("bound %g", lb.Seconds())
	}
	if got := tab.WorkingSet(3); got != 24 {
		t.Errorf("working set of d = %d, want 24 (two inputs and an output of 8 B)", got)
	}
}

func TestBytesMovedSelection(t *testing.T) {
	// Gather and Slice read of their first input only what they write.
	for _, c := range []struct {
		typ  string
		want int64
	}{
		{"Gather", 4*128*768 + 8*128 + 4*128*768},
		{"Slice", 4*128*768 + 8*128 + 4*128*768},
		{"Add", 4*30522*768 + 8*128 + 4*128*768},
	} {
		g := graph.New("sel", 1, 3)
		data, _ := g.AddTensor(graph.Tensor{Name: "table", DType: graph.Float32, Shape: []int64{30522, 768}, ShapeKnown: true, Kind: graph.Parameter, Producer: graph.NoOp})
		idx, _ := g.AddTensor(graph.Tensor{Name: "ids", DType: graph.Int64, Shape: []int64{1, 128}, ShapeKnown: true, Kind: graph.Input, Producer: graph.NoOp})
		out, _ := g.AddTensor(graph.Tensor{Name: "out", DType: graph.Float32, Shape: []int64{1, 128, 768}, ShapeKnown: true, Producer: graph.NoOp})
		if _, err := g.AddOp(graph.Op{Name: "op", Type: c.typ, Inputs: []graph.TensorID{data, idx}, Outputs: []graph.TensorID{out}}); err != nil {
			t.Fatal(err)
		}
		if got := cost.BytesMoved(g, 0); got != c.want {
			t.Errorf("%s: %d bytes, want %d", c.typ, got, c.want)
		}
	}
}

func TestTableWithFree(t *testing.T) {
	b := graphtest.New("chain").Input("x", 8).Op("a", 2e9, 8, "x").Op("b", 4e9, 8, "a")
	c := graphtest.Cluster(1e9, 0, graphtest.Device{FLOPS: 1e9, Memory: 1 << 30})
	tab := cost.NewTable(b.G, c, cost.Roofline{})
	free := tab.WithFree([]bool{true, false})
	if free.OpTime(0, 0) != 0 || free.OpTime(1, 0) != tab.OpTime(1, 0) || !(tab.OpTime(0, 0) > 0) {
		t.Errorf("free op a: %g (was %g), b: %g (was %g)", free.OpTime(0, 0), tab.OpTime(0, 0), free.OpTime(1, 0), tab.OpTime(1, 0))
	}
}
