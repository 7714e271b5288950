package partition

import (
	"context"
	"testing"

	"github.com/opplace/opplace/cluster"
	"github.com/opplace/opplace/cost"
	"github.com/opplace/opplace/graph"
	"github.com/opplace/opplace/graph/graphtest"
)

const giga = 1e9

// fwdOp describes a forward op of a test graph.
type fwdOp struct {
	name   string
	gflops float64
	out    int64 // output bytes
	param  int64 // parameter bytes (0: none)
	inputs []string
}

// buildGraph makes a graph from forward ops; with training, each op gets
// a backward op of twice its FLOPs colocated with it, reading the op's
// inputs and the gradients of its consumers, as the training mode emits,
// and an op with a parameter a free backward op making its weight's
// gradient ("_grad_w") and a free update reading it ("_grad_u").
func buildGraph(ops []fwdOp, training bool) *graph.Graph {
	b := graphtest.New("test").Input("x", 1)
	for _, o := range ops {
		ins := append([]string(nil), o.inputs...)
		if o.param > 0 {
			b.Param(o.name+".w", o.param)
			ins = append(ins, o.name+".w")
		}
		b.Op(o.name, int64(o.gflops*giga), o.out, ins...)
	}
	g := b.G
	for i := range g.Ops {
		g.Ops[i].Colocate = g.Ops[i].Name
	}
	if !training {
		return g
	}
	consumers := map[string][]string{}
	for _, o := range ops {
		for _, in := range o.inputs {
			consumers[in] = append(consumers[in], o.name)
		}
	}
	for i := len(ops) - 1; i >= 0; i-- {
		o := ops[i]
		var ins []string
		for _, in := range o.inputs {
			if in != "x" {
				ins = append(ins, in)
			}
		}
		for _, c := range consumers[o.name] {
			ins = append(ins, c+"_grad")
		}
		if len(ins) == 0 {
			ins = []string{"x"}
		}
		b.Op(o.name+"_grad", int64(2*o.gflops*giga), 1, ins...)
		op := &g.Ops[len(g.Ops)-1]
		op.Phase = graph.Backward
		op.Colocate = o.name
		if o.param > 0 {
			// The weight's gradient, and the free update reading it: the
			// replicas all-reduce the gradient, as the training mode's
			// graphs have them.
			b.Op(o.name+"_grad_w", 0, o.param, o.name+"_grad")
			op = &g.Ops[len(g.Ops)-1]
			op.Phase, op.Colocate = graph.Backward, o.name
			b.Op(o.name+"_grad_u", 0, 0, o.name+".w", o.name+"_grad_w")
			op = &g.Ops[len(g.Ops)-1]
			op.Phase, op.Colocate = graph.Update, o.name
		}
	}
	return g
}

func testCluster(n int, mem int64, bw float64) *cluster.Cluster {
	devs := make([]graphtest.Device, n)
	for i := range devs {
		devs[i] = graphtest.Device{FLOPS: giga, Memory: mem}
	}
	return graphtest.Cluster(bw, 0, devs...)
}

func newTestProblem(t testing.TB, g *graph.Graph, c *cluster.Cluster, opts Options) *Problem {
	t.Helper()
	p, err := NewProblem(cost.NewTable(g, c, cost.Roofline{ComputeEfficiency: 1, MemoryEfficiency: 1}), opts)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func run(t testing.TB, name string, p *Problem) *Plan {
	t.Helper()
	part, err := New(name)
	if err != nil {
		t.Fatal(err)
	}
	pl, err := part.Partition(context.Background(), p)
	if err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return pl
}

// graphtestCluster2 is one 2 GFLOP/s and one 1 GFLOP/s device on 1 GB/s.
func graphtestCluster2() *cluster.Cluster {
	return graphtest.Cluster(giga, 0, graphtest.Device{FLOPS: 2 * giga, Memory: 1 << 40}, graphtest.Device{FLOPS: giga, Memory: 1 << 40})
}
