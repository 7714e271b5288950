package cost

import (
	"slices"

	"github.com/opplace/opplace/cluster"
	"github.com/opplace/opplace/graph"
)

// Shape is an op's time on a device type, less its launch, in the parts a
// run that does only a share of the op's work scales differently: a data
// replica's micro-batch, a tensor-parallel member's shard. The roofline
// charges a whole op max(Compute + Ramp, Memory); a run doing share s of
// its work, with fixed of its memory traffic in tensors whose size does
// not follow the work (weights, weight gradients), of which it moves w,
//
//	max(Compute·s + Ramp, Memory·(fixed·w + (1-fixed)·s))
//
// so a small GEMM keeps its under-use of the device however finely the
// batch is split, and every replica reads its weights whole. Run gives
// that as a fraction of the whole op's time.
type Shape struct {
	// Compute is the op's FLOPs at the efficiency of a large kernel.
	Compute float64
	// Ramp is what a matmul or convolution loses to its size: the
	// roofline's W FLOPs take (W + MatmulHalf)/(peak × efficiency), so
	// MatmulHalf FLOPs' time whatever W (cluster.Efficiency.MatmulHalf).
	Ramp float64
	// Memory is the op's memory traffic time (Roofline.MemoryTime).
	Memory float64
	// Fixed is the part of the op's memory traffic in tensors whose size
	// does not follow the batch (FixedTensors). The Table fills it in from
	// the graph, unless the model gives it (non-zero): a proxy model whose
	// op stands for a share of another op's run moves another mix.
	Fixed float64
}

// Shaper is implemented by cost models that can say how an op's time
// scales with the share of its work a run does (see Shape). A model that
// cannot (measured costs without FLOPs or bytes) leaves every run's time
// proportional to its share.
type Shaper interface {
	Shape(g *graph.Graph, op graph.OpID, dt *cluster.DeviceType) Shape
}

// Run is the fraction of the op's time, less its launch, that a run
// takes which does share of the op's work and moves weights of its
// fixed-size tensors (see Shape). An op the model gives no shape to takes
// share.
func (s Shape) Run(share, weights float64) float64 {
	whole := max(s.Compute+s.Ramp, s.Memory)
	if !(whole > 0) {
		return share
	}
	part := max(s.Compute*share+s.Ramp, s.Memory*(s.Fixed*weights+(1-s.Fixed)*share))
	return part / whole
}

// FixedAt is the fraction a of the op's time, less its launch, of the
// line a + (1-a)·share through Run at shares 1 and at: the partitioners'
// linear cost of a run. Run is convex in the share, so the line is above it
// between at and 1 and below it under at; exact at both.
func (s Shape) FixedAt(at float64) float64 {
	if !(at > 0 && at < 1) {
		return 0
	}
	return max(0, (s.Run(at, 1)-at)/(1-at))
}

// FixedTensors marks the tensors whose size does not follow the batch:
// parameters and constants; what ops compute from those alone (a
// weight's low-precision copy, its transpose); and weight gradients: a
// tensor every reader of which is an update, or an op of as many
// elements whose outputs are all such (the gradient's cast to float32,
// its unscaling, the sum of a shared weight's gradients). A graph whose
// order cannot be found (a cycle) gets the parameters and constants only.
func FixedTensors(g *graph.Graph) []bool {
	fixed := make([]bool, len(g.Tensors))
	for t := range g.Tensors {
		fixed[t] = g.Tensors[t].Kind.IsResident()
	}
	order, err := g.TopoOrder(g.BuildAdjacency())
	if err != nil {
		return fixed
	}
	for _, op := range order {
		o := &g.Ops[op]
		if len(o.Inputs) == 0 || slices.ContainsFunc(o.Inputs, func(in graph.TensorID) bool { return !fixed[in] }) {
			continue
		}
		for _, out := range o.Outputs {
			fixed[out] = true
		}
	}
	for i := len(order) - 1; i >= 0; i-- {
		o := &g.Ops[order[i]]
		for _, out := range o.Outputs {
			if fixed[out] {
				continue
			}
			tn := &g.Tensors[out]
			fixed[out] = len(tn.Consumers) > 0 && !slices.ContainsFunc(tn.Consumers, func(c graph.OpID) bool {
				co := &g.Ops[c]
				if co.Phase == graph.Update {
					return false
				}
				return len(co.Outputs) == 0 || slices.ContainsFunc(co.Outputs, func(x graph.TensorID) bool {
					return !fixed[x] || g.Tensors[x].Elements() != tn.Elements()
				})
			})
		}
	}
	return fixed
}

// RunTime is how long a run of op on device dev takes that does share
// of the op's work and moves weights of its fixed-size tensors (see
// Shape.Run): its launch whole, the rest scaled by Run. share 1 (or an op
// that takes no time) is the op's time.
func (t *Table) RunTime(op graph.OpID, dev int, share, weights float64) float64 {
	full := t.OpTime(op, dev)
	if share == 1 || full <= 0 {
		return full
	}
	launch := min(t.Cluster.Devices[dev].Type.LaunchOverhead, full)
	return (full-launch)*t.Shape(op, dev).Run(share, weights) + launch
}

// Shape is op's shape on device dev (zero when the table's model gives
// none, see Shaper).
func (t *Table) Shape(op graph.OpID, dev int) Shape {
	if t.shape == nil {
		return Shape{}
	}
	s := t.shape[int(op)*len(t.types)+t.typeOf[dev]]
	return Shape{Compute: float64(s[0]), Ramp: float64(s[1]), Memory: float64(s[2]), Fixed: float64(t.fixed[op])}
}
