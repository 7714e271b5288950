package graph_test

import (
	"errors"
	"slices"
	"strings"
	"testing"

	"github.com/opplace/opplace/graph"
	"github.com/opplace/opplace/graph/graphtest"
)

// checkGraph is x, w -> a -> b -> c (c reads b twice and a once) -> out,
// and d, which reads x and waits on a.
func checkGraph() *graph.Graph {
	g := graphtest.New("checked").Input("x", 8).Param("w", 4).
		Op("a", 10, 8, "x", "w").Op("b", 10, 8, "a").Op("c", 10, 8, "b", "a", "b").Op("d", 10, 8, "x").
		Output("c").G
	d, _ := g.OpByName("d")
	a, _ := g.OpByName("a")
	g.Ops[d].ControlDeps = []graph.OpID{a}
	return g
}

func TestCheck(t *testing.T) {
	op := func(g *graph.Graph, name string) *graph.Op {
		id, ok := g.OpByName(name)
		if !ok {
			t.Fatalf("no op %q", name)
		}
		return &g.Ops[id]
	}
	tensor := func(g *graph.Graph, name string) *graph.Tensor {
		id, ok := g.TensorByName(name)
		if !ok {
			t.Fatalf("no tensor %q", name)
		}
		return &g.Tensors[id]
	}
	id := func(g *graph.Graph, name string) graph.TensorID {
		id, _ := g.TensorByName(name)
		return id
	}
	for _, tc := range []struct {
		name    string
		corrupt func(g *graph.Graph)
		inv     graph.Invariant // "": no error
		op      string
		tensor  string
		detail  string
	}{
		{name: "intact", corrupt: func(*graph.Graph) {}},
		{name: "consumers listed out of order", corrupt: func(g *graph.Graph) {
			slices.Reverse(tensor(g, "a").Consumers)
		}},
		{"producer out of range", func(g *graph.Graph) { tensor(g, "a").Producer = 99 },
			graph.InvRange, "", "a", "producer id 99 is out of range (4 ops)"},
		{"consumer out of range", func(g *graph.Graph) { tensor(g, "b").Consumers[0] = -2 },
			graph.InvRange, "", "b", "consumer id -2 is out of range"},
		{"input out of range", func(g *graph.Graph) { op(g, "b").Inputs[0] = 99 },
			graph.InvRange, "b", "", "input tensor id 99 is out of range (6 tensors)"},
		{"output out of range", func(g *graph.Graph) { op(g, "c").Outputs[0] = -1 },
			graph.InvRange, "c", "", "output tensor id -1 is out of range"},
		{"control dependency out of range", func(g *graph.Graph) { op(g, "d").ControlDeps[0] = 4 },
			graph.InvRange, "d", "", "control dependency id 4 is out of range (4 ops)"},
		{"graph output out of range", func(g *graph.Graph) { g.Outputs[0] = 6 },
			graph.InvRange, "", "", "graph output tensor id 6 is out of range"},
		{"unknown tensor kind", func(g *graph.Graph) { tensor(g, "w").Kind = 7 },
			graph.InvKind, "", "w", "unknown kind 7"},
		{"unknown element type", func(g *graph.Graph) { tensor(g, "x").DType = 200 },
			graph.InvKind, "", "x", "unknown element type 200"},
		{"negative axis", func(g *graph.Graph) { tensor(g, "b").Shape = []int64{2, -1} },
			graph.InvShape, "", "b", "axis 1 of shape [2 -1] is negative"},
		{"elements past int64", func(g *graph.Graph) { tensor(g, "b").Shape = []int64{1 << 32, 1 << 32} },
			graph.InvShape, "", "b", "more elements than an int64 counts"},
		{"unknown phase", func(g *graph.Graph) { op(g, "c").Phase = 3 },
			graph.InvKind, "c", "", "unknown phase 3"},
		{"negative work", func(g *graph.Graph) { op(g, "b").Work.FLOPs = -1 },
			graph.InvKind, "b", "", "negative work (-1 FLOPs"},
		{"op writes a parameter", func(g *graph.Graph) { op(g, "a").Outputs = append(op(g, "a").Outputs, id(g, "w")) },
			graph.InvKind, "a", "w", `writes "w", a parameter`},
		{"output listed twice", func(g *graph.Graph) { op(g, "a").Outputs = append(op(g, "a").Outputs, id(g, "a")) },
			graph.InvDuplicate, "a", "a", `lists output "a" twice`},
		{"two writers", func(g *graph.Graph) { op(g, "b").Outputs = append(op(g, "b").Outputs, id(g, "a")) },
			graph.InvDuplicate, "b", "a", `writes "a", which op "a" writes too`},
		{"producer names another op", func(g *graph.Graph) { tensor(g, "b").Producer, _ = g.OpByName("d") },
			graph.InvSymmetry, "b", "b", `lists output "b", whose producer is op "d"`},
		{"producer none", func(g *graph.Graph) { tensor(g, "b").Producer = graph.NoOp },
			graph.InvSymmetry, "b", "b", `lists output "b", whose producer is none`},
		{"producer lacks the output", func(g *graph.Graph) { op(g, "b").Outputs = nil },
			graph.InvSymmetry, "b", "b", `is the producer tensor "b" names, but does not list it as an output`},
		{"a read missing from the consumers", func(g *graph.Graph) {
			b := tensor(g, "b")
			b.Consumers = b.Consumers[:1]
		}, graph.InvSymmetry, "c", "b", `reads "b" twice but the tensor lists it as a consumer once`},
		{"a consumer that does not read", func(g *graph.Graph) {
			d, _ := g.OpByName("d")
			x := tensor(g, "a")
			x.Consumers = append(x.Consumers, d)
		}, graph.InvSymmetry, "d", "a", `reads "a" never but the tensor lists it as a consumer once`},
		{"two ops of one name", func(g *graph.Graph) { op(g, "b").Name = "a" },
			graph.InvName, "a", "", "the name is also op 0's"},
		{"renamed without the index", func(g *graph.Graph) { op(g, "b").Name = "z" },
			graph.InvName, "z", "", "the name is missing from the op name index"},
		{"renamed tensor without the index", func(g *graph.Graph) { tensor(g, "b").Name = "z" },
			graph.InvName, "", "z", "the name is missing from the tensor name index"},
		{"a cycle through a control dependency", func(g *graph.Graph) { op(g, "a").ControlDeps, _ = []graph.OpID{2}, 0 },
			graph.InvAcyclic, "c", "", `the graph has a cycle: c -> a -> c`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			g := checkGraph()
			tc.corrupt(g)
			err := graph.Check(g)
			if tc.inv == "" {
				if err != nil {
					t.Fatalf("Check: %v, want nil", err)
				}
				return
			}
			var ce *graph.CheckError
			if !errors.As(err, &ce) {
				t.Fatalf("Check: %v, want a *CheckError", err)
			}
			if ce.Invariant != tc.inv || ce.Op != tc.op || ce.Tensor != tc.tensor || !strings.Contains(ce.Detail, tc.detail) || ce.Graph != "checked" {
				t.Errorf("Check: %+v\nwant invariant %q, op %q, tensor %q, detail containing %q", ce, tc.inv, tc.op, tc.tensor, tc.detail)
			}
			if !strings.Contains(err.Error(), string(tc.inv)) {
				t.Errorf("message %q does not name the invariant", err)
			}
		})
	}
}

// TestCheckUnindexed checks names of a graph whose name index was never
// built (a literal Graph): duplicates are found all the same.
func TestCheckUnindexed(t *testing.T) {
	src := checkGraph()
	g := &graph.Graph{Name: "literal", Ops: src.Ops, Tensors: src.Tensors, Inputs: src.Inputs, Outputs: src.Outputs}
	if err := graph.Check(g); err != nil {
		t.Fatalf("Check: %v", err)
	}
	g.Tensors[3].Name = g.Tensors[1].Name
	var ce *graph.CheckError
	if err := graph.Check(g); !errors.As(err, &ce) || ce.Invariant != graph.InvName || ce.Tensor != g.Tensors[1].Name {
		t.Fatalf("Check: %v, want tensor %q's name reported used twice", err, g.Tensors[1].Name)
	}
}

// TestCheckCoarse corrupts the maps of a fused graph.
func TestCheckCoarse(t *testing.T) {
	coarse := func() *graph.Coarse {
		g := checkGraph()
		gr := graph.NewGrouping(len(g.Ops))
		gr.Union(1, 2) // b+c
		c, err := graph.Coarsen(g, gr)
		if err != nil {
			t.Fatal(err)
		}
		return c
	}
	for _, tc := range []struct {
		name    string
		corrupt func(c *graph.Coarse)
		detail  string // "": no error
	}{
		{"intact", func(*graph.Coarse) {}, ""},
		{"a group id that disagrees", func(c *graph.Coarse) { c.GroupOf[2] = 0 }, "lists member id 2, whose group is not this op"},
		{"members out of order", func(c *graph.Coarse) { slices.Reverse(c.Members[1]) }, "lists its members out of order"},
		{"a fine op in no group", func(c *graph.Coarse) { c.Members[1] = c.Members[1][:1] }, "the groups hold 3 fine ops of 4"},
		{"an empty group", func(c *graph.Coarse) { c.Members[2] = nil }, "groups no fine op"},
		{"a pin the members lack", func(c *graph.Coarse) { c.Graph.Ops[1].Device = "gpu1" }, `has colocation "" and device "gpu1"`},
		{"a tensor whose shape differs", func(c *graph.Coarse) { c.Graph.Tensors[3].Shape = []int64{9} }, `tensor id 3 is "b" (activation uint8 9)`},
		{"the coarse graph broken", func(c *graph.Coarse) { c.Graph.Tensors[0].Producer = 9 }, "producer id 9 is out of range"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := coarse()
			tc.corrupt(c)
			err := c.Check()
			if tc.detail == "" {
				if err != nil {
					t.Fatalf("Check: %v", err)
				}
				return
			}
			if err == nil || !strings.Contains(err.Error(), tc.detail) {
				t.Fatalf("Check: %v, want one saying %q", err, tc.detail)
			}
		})
	}
}
