package shapes

import (
	"fmt"

	"github.com/opplace/opplace/graph"
)

// MaxTotal bounds what one imported forward graph may count, each summed
// over the whole graph: FLOPs, MACs and the bytes of all its tensors.
// 2^60 (1.15e18 FLOPs, 1 EiB) is beyond any real step at a batch a
// cluster can hold (a 70-billion-parameter model's forward pass over a
// million tokens is 1.4e17 FLOPs), so a graph past it is a batch or
// dimension bound by mistake; and it leaves int64 room for the training
// step built from the graph (about three times the forward work) and for
// every sum computed downstream.
const MaxTotal = int64(1) << 60

// CheckTotals rejects a graph whose FLOPs, MACs or tensor bytes, summed
// over the graph, reach MaxTotal, naming the op or tensor at which the
// sum passes it and its shape. Work of control-flow bodies is counted
// through the op that runs them, so nested graphs are not walked.
func CheckTotals(g *graph.Graph) error {
	var flops, macs int64
	for i := range g.Ops {
		op := &g.Ops[i]
		w := op.Work
		if w.FLOPs < 0 || w.MACs < 0 {
			return fmt.Errorf("op %q (%s) counts negative work (%d FLOPs, %d MACs)", op.Name, op.Type, w.FLOPs, w.MACs)
		}
		flops = min(flops+min(w.FLOPs, MaxTotal), MaxTotal)
		macs = min(macs+min(w.MACs, MaxTotal), MaxTotal)
		if flops >= MaxTotal || macs >= MaxTotal {
			what := "FLOPs"
			if flops < MaxTotal {
				what = "MACs"
			}
			return fmt.Errorf("op %q (%s, output %s): the graph's %s reach 2^60 (1.15e18) here, beyond any real model's step; bind a smaller batch or dimension",
				op.Name, op.Type, outputShapes(g, op), what)
		}
	}
	var bytes int64
	for i := range g.Tensors {
		t := &g.Tensors[i]
		bytes = min(bytes+min(tensorBytes(t), MaxTotal), MaxTotal)
		if bytes >= MaxTotal {
			return fmt.Errorf("tensor %q (%s %s): the graph's tensors reach 2^60 bytes (1 EiB) here, beyond any real model's memory; bind a smaller batch or dimension",
				t.Name, t.DType, t.ShapeString())
		}
	}
	return nil
}

// tensorBytes is t's size without wrapping: MaxTotal when it would pass it.
func tensorBytes(t *graph.Tensor) int64 {
	if !t.ShapeKnown {
		return 0
	}
	n := max(t.DType.Size(), 1)
	for _, d := range t.Shape {
		if d <= 0 {
			return 0
		}
		if n > MaxTotal/d {
			return MaxTotal
		}
		n *= d
	}
	return n
}

func outputShapes(g *graph.Graph, op *graph.Op) string {
	s := ""
	for i, id := range op.Outputs {
		if i > 0 {
			s += ", "
		}
		s += g.Tensor(id).ShapeString()
	}
	if s == "" {
		return "none"
	}
	return s
}
