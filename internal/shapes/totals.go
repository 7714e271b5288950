package shapes

import (
	"fmt"

	"github.com/opplace/opplace/graph"
)

// MaxTotal bounds what one op or one tensor of an imported forward graph
// may count: one op's FLOPs or MACs, one tensor's elements or bytes, and
// the bytes of all the graph's tensors summed. 2^60 (1.15e18) is where
// these int64 counts come near overflowing: the training step multiplies
// an op's work by its gradient factor (train refuses past 2^62), and
// memory is summed per device in int64. It is also beyond any real op or
// tensor: the largest op of a 145-billion-parameter GPT at a global batch
// of 2,304 × 2,048 tokens is 6e15 FLOPs, its largest tensor 4e12 bytes,
// and all its forward tensors together 1e15 bytes. The whole graph's FLOPs
// are not bounded: a training step of a 100B+ model is 1e18-1e19 FLOPs,
// and every sum of work is taken in float64 (WorkTotals).
const MaxTotal = int64(1) << 60

// CheckTotals rejects a graph with an op whose FLOPs or MACs reach
// MaxTotal, a tensor whose bytes (so also its element count) reach it, or tensors
// whose bytes, summed over the graph, reach it, naming the op or tensor
// and its shape. Work of control-flow bodies is counted through the op
// that runs them, so nested graphs are not walked.
func CheckTotals(g *graph.Graph) error {
	for i := range g.Ops {
		op := &g.Ops[i]
		w := op.Work
		if w.FLOPs < 0 || w.MACs < 0 {
			return fmt.Errorf("op %q (%s) counts negative work (%d FLOPs, %d MACs)", op.Name, op.Type, w.FLOPs, w.MACs)
		}
		if w.FLOPs >= MaxTotal || w.MACs >= MaxTotal {
			what := "FLOPs"
			if w.FLOPs < MaxTotal {
				what = "MACs"
			}
			return fmt.Errorf("op %q (%s, output %s): its %s reach 2^60 (1.15e18), beyond any op of a real model's step; bind a smaller batch or dimension",
				op.Name, op.Type, outputShapes(g, op), what)
		}
	}
	var bytes int64
	for i := range g.Tensors {
		t := &g.Tensors[i]
		if tensorBytes(t) >= MaxTotal { // its bytes bound its element count
			return fmt.Errorf("tensor %q (%s %s): its size reaches 2^60 bytes (1 EiB), beyond any real model's tensor; bind a smaller batch or dimension",
				t.Name, t.DType, t.ShapeString())
		}
		bytes = min(bytes+tensorBytes(t), MaxTotal)
		if bytes >= MaxTotal {
			return fmt.Errorf("tensor %q (%s %s): the graph's tensors reach 2^60 bytes (1 EiB) here, beyond any cluster's memory; bind a smaller batch or dimension",
				t.Name, t.DType, t.ShapeString())
		}
	}
	return nil
}

// WorkTotals sums the FLOPs and MACs of g's ops in float64, which no
// real graph's step overflows (int64 does past 9.2e18 FLOPs, within reach
// of a training step of a few hundred billion parameters).
func WorkTotals(g *graph.Graph) (flops, macs float64) {
	for i := range g.Ops {
		flops += float64(g.Ops[i].Work.FLOPs)
		macs += float64(g.Ops[i].Work.MACs)
	}
	return flops, macs
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
