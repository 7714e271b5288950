package graph

import "strings"

// LoadTimeOps reports, per op, whether an inference runtime computes it
// once when it loads the model rather than in every inference: every
// tensor it reads is known at load time (a parameter or constant, the
// shape or size of a tensor of known shape, or the output of another such
// op; an op with no inputs only if it is a Constant or the like) and it
// is not random. ONNX Runtime folds these (constant folding:
// a transpose of a weight, the Shape -> Gather -> Concat arithmetic of
// exported reshapes) before the first run, so they take no time per
// inference; a training step recomputes the ones that read weights,
// which change every step.
func (g *Graph) LoadTimeOps() []bool {
	known := make([]bool, len(g.Tensors))
	for i := range g.Tensors {
		known[i] = g.Tensors[i].Kind.IsResident()
	}
	out := make([]bool, len(g.Ops))
	order, err := g.TopoOrder(g.BuildAdjacency())
	if err != nil {
		return out // a cyclic graph folds nothing
	}
	for _, id := range order {
		op := &g.Ops[id]
		if strings.Contains(op.Type, "Random") || op.Type == "Multinomial" || op.Type == "Bernoulli" {
			continue
		}
		// An op without inputs folds when it does no work (a Constant);
		// one that does work from nothing (a costed graph's source op)
		// runs.
		fold := len(op.Inputs) > 0 || Bookkeeping(op.Type)
		switch op.Type {
		case "Shape", "Size":
			// Known from the input's shape alone.
			fold = len(op.Inputs) == 1 && g.Tensors[op.Inputs[0]].ShapeKnown
		default:
			for _, t := range op.Inputs {
				fold = fold && known[t]
			}
		}
		if !fold {
			continue
		}
		out[id] = true
		for _, t := range op.Outputs {
			known[t] = true
		}
	}
	return out
}
