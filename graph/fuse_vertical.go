package graph

func init() {
	RegisterFusionPass(FusionPass{
		Name:    "vertical",
		Summary: "fuse producer-consumer chains: an anchor (Conv, MatMul, Gemm) with its elementwise epilogue (BatchNorm, bias Add, ReLU, GELU), and runs of elementwise ops",
		Run:     fuseVertical,
	})
	RegisterFusionMode("vertical", "vertical")
}

// fuseVertical merges a group into a consumer group when the tensors
// between them stop travelling through memory: every such tensor is read
// only inside the merged group (or, in a training step, also by gradient
// ops, for which it is still saved) and is not a graph output. Both groups must
// hold only anchor, elementwise and view ops, and together at most one
// anchor (a kernel has one main loop nest; two convolutions in a row stay
// two kernels).
//
// Consumers are visited in topological order, so a chain grows from its
// head; each consumer retries its producers until none merges, which
// catches an expanded GELU whose first input is read twice inside the
// chain (x * 0.5 * (1 + erf(x / sqrt 2))).
func fuseVertical(f *Fuser) int {
	g := f.Graph()
	adj := g.BuildAdjacency()
	order, err := g.TopoOrder(adj)
	if err != nil {
		return 0 // NewFuser already rejected cyclic graphs
	}
	isOutput := make([]bool, len(g.Tensors))
	for _, t := range g.Outputs {
		isOutput[t] = true
	}
	merged := 0
	var preds []OpID
	for _, v := range order {
		if t := g.Ops[v].Type; !IsElementwiseOp(t) && !IsViewOp(t) {
			continue
		}
		for changed := true; changed; {
			changed = false
			c := f.Find(v)
			preds = append(preds[:0], f.Preds(c)...)
			for _, p := range preds {
				if verticalOK(f, isOutput, p, c) && f.Merge(p, c) {
					merged++
					changed = true
					break
				}
			}
		}
	}
	return merged
}

// verticalOK checks the fusion rule for producer group p and consumer
// group c (CanMerge's cycle and constraint checks come after). The
// tensors between them are found from the smaller group's side (the
// outputs of p's ops, or the inputs of c's), so growing a long chain one
// op at a time does not walk the chain once per op.
func verticalOK(f *Fuser, isOutput []bool, p, c OpID) bool {
	if f.Opaque(p)+f.Opaque(c) > 0 || f.Anchors(p)+f.Anchors(c) > 1 {
		return false
	}
	g := f.Graph()
	rp, rc := f.Find(p), f.Find(c)
	linked := false
	if len(f.members[rc]) < len(f.members[rp]) {
		for _, m := range f.members[rc] {
			for _, t := range g.Ops[m].Inputs {
				if pr := g.Tensors[t].Producer; pr == NoOp || f.Find(pr) != rp {
					continue
				}
				if !keptInside(f, isOutput, t, rp, rc) {
					return false
				}
				linked = true
			}
		}
		return linked
	}
	for _, m := range f.members[rp] {
		for _, t := range g.Ops[m].Outputs {
			reads := false
			for _, u := range g.Tensors[t].Consumers {
				if f.Find(u) == rc {
					reads = true
					break
				}
			}
			if !reads {
				continue
			}
			if !keptInside(f, isOutput, t, rp, rc) {
				return false
			}
			linked = true
		}
	}
	return linked
}

// keptInside reports whether tensor t, written by group rp and read by
// group rc, may stay inside their fused kernel: it is not a graph output
// and no third group reads it. A gradient reading the tensor later does
// not stop the forward kernel fusing: the tensor is written once for it
// (Coarsen keeps it as the kernel's output), as training runtimes save
// fused activations.
func keptInside(f *Fuser, isOutput []bool, t TensorID, rp, rc OpID) bool {
	if isOutput[t] {
		return false
	}
	g := f.Graph()
	for _, u := range g.Tensors[t].Consumers {
		if r := f.Find(u); r != rp && r != rc && (g.Ops[u].Phase != Backward || g.Ops[rp].Phase != Forward) {
			return false
		}
	}
	return true
}
