package shapes

import (
	"math"
	"strings"
	"testing"

	"github.com/opplace/opplace/graph"
)

// chain builds x → op0 → op1 → ... with the given per-op FLOPs and every
// tensor of the given shape.
func chain(t *testing.T, flops []int64, shape ...int64) *graph.Graph {
	t.Helper()
	g := graph.New("chain", len(flops), len(flops)+1)
	prev, err := g.AddTensor(graph.Tensor{Name: "x", DType: graph.Float32, Shape: shape, ShapeKnown: true, Kind: graph.Input})
	if err != nil {
		t.Fatal(err)
	}
	for i, f := range flops {
		out, err := g.AddTensor(graph.Tensor{Name: "t" + string(rune('a'+i)), DType: graph.Float32, Shape: shape, ShapeKnown: true, Kind: graph.Activation})
		if err != nil {
			t.Fatal(err)
		}
		if _, err := g.AddOp(graph.Op{Name: "op" + string(rune('a'+i)), Type: "MatMul", Inputs: []graph.TensorID{prev},
			Outputs: []graph.TensorID{out}, Work: graph.Work{FLOPs: f, MACs: f / 2}}); err != nil {
			t.Fatal(err)
		}
		prev = out
	}
	return g
}

func TestCheckTotals(t *testing.T) {
	macsOnly := chain(t, []int64{1}, 2, 3)
	macsOnly.Ops[0].Work.MACs = 1 << 60
	for _, tc := range []struct {
		name string
		g    *graph.Graph
		want string // "" for no error
	}{
		{"fits", chain(t, []int64{1 << 59, 1<<60 - 1}, 2, 3), ""},
		// A step's FLOPs past int64 are real (a 100B+ model's); only one
		// op's are bounded.
		{"FLOPs sum past int64", chain(t, []int64{1<<60 - 1, 1<<60 - 1, 1<<60 - 1, 1<<60 - 1, 1<<60 - 1, 1<<60 - 1, 1<<60 - 1, 1<<60 - 1, 1<<60 - 1}, 2, 3), ""},
		{"one op's FLOPs reach 2^60", chain(t, []int64{1, 1 << 60}, 2, 3), `op "opb" (MatMul, output 2x3): its FLOPs reach 2^60`},
		{"one op's MACs reach 2^60", macsOnly, `op "opa" (MatMul, output 2x3): its MACs reach 2^60`},
		{"saturated op", chain(t, []int64{math.MaxInt64}, 5), `op "opa" (MatMul, output 5): its FLOPs reach 2^60`},
		{"negative work", chain(t, []int64{-7886245180909551568}, 5), `op "opa" (MatMul) counts negative work`},
		{"bytes", chain(t, []int64{1, 1, 1}, 1<<28, 1<<29), `tensor "ta" (float32 268435456x536870912): the graph's tensors reach 2^60 bytes`},
		{"bytes of one tensor reach 2^60", chain(t, []int64{1}, 1<<29, 1<<29), `tensor "x" (float32 536870912x536870912): its size reaches 2^60 bytes`},
		{"bytes of one tensor past int64", chain(t, []int64{1}, 1<<40, 1<<40, 1<<40), `tensor "x" (float32 1099511627776x1099511627776x1099511627776): its size reaches 2^60 bytes`},
	} {
		t.Run(tc.name, func(t *testing.T) {
			err := CheckTotals(tc.g)
			switch {
			case tc.want == "" && err != nil:
				t.Errorf("error %v, want none", err)
			case tc.want != "" && (err == nil || !strings.Contains(err.Error(), tc.want)):
				t.Errorf("error %v, want one containing %q", err, tc.want)
			}
		})
	}
}
