package cost

import "github.com/opplace/opplace/graph"

// Footprint is what a set of ops adds to one device's memory at a
// training step's peak, the moment the last forward op has run and the
// first backward op starts, as the partitioners' and the ilp placer's
// memory models count it:
//
//   - Resident: the parameters, constants and optimizer state the ops
//     read, each tensor once, and the weight gradients their update ops
//     read (the simulator keeps a gradient buffer for the step);
//   - Stash: the forward ops' outputs, which their gradient ops read, so
//     they live until the backward pass reaches them (in an inference
//     graph this over-counts: the simulator frees an output once read);
//   - Temp: the largest scratch any of the ops needs while it runs.
//
// Tensors received from other devices are not counted: what crosses
// depends on where the neighbours run.
type Footprint struct {
	Resident, Stash, Temp int64
}

// Footprint sums ops' footprint (see Footprint).
func (t *Table) Footprint(ops []graph.OpID) Footprint {
	g := t.Graph
	var f Footprint
	var seen map[graph.TensorID]bool
	for _, op := range ops {
		o := &g.Ops[op]
		for _, in := range o.Inputs {
			if tn := &g.Tensors[in]; tn.Kind.IsResident() && !seen[in] {
				if seen == nil {
					seen = map[graph.TensorID]bool{}
				}
				seen[in] = true
				f.Resident += tn.Bytes()
			}
		}
		switch o.Phase {
		case graph.Update:
			var grad int64
			for _, in := range o.Inputs {
				if tn := &g.Tensors[in]; tn.Kind == graph.Activation {
					grad = max(grad, tn.Bytes())
				}
			}
			f.Resident += grad
		case graph.Forward:
			f.Stash += t.outBytes[op]
		}
		f.Temp = max(f.Temp, t.tempBytes[op])
	}
	return f
}

// Transient is the most memory one op needs beyond a Footprint while it
// runs: its scratch, plus its outputs when it is no forward op (a
// gradient lives only until the next gradient op reads it, so it is in
// no Stash).
func (t *Table) Transient(op graph.OpID) int64 {
	b := t.tempBytes[op]
	if t.Graph.Ops[op].Phase != graph.Forward {
		b += t.outBytes[op]
	}
	return b
}
