package sim

import (
	"slices"

	"github.com/opplace/opplace/graph"
)

// Scale says how a plan divides the instance of a tensor that a device
// holds, as Run sizes it; memory bounds that must hold for every plan take
// each tensor at the finest division its scale allows.
type Scale uint8

const (
	// Whole: only a tensor-parallel group divides it, each member holding
	// 1/t (parameters, constants, and what ops outside the micro-batches
	// compute, such as a weight's low-precision copy).
	Whole Scale = iota
	// PerSample: a share of the batch, divided by a stage's replicas ×
	// micro-batches (a graph input: by the replicas), and by its tensor
	// group.
	PerSample
	// Sharded: optimizer state, which ZeRO divides among a stage's
	// replicas as well as its tensor group divides it.
	Sharded
	// Pooled: a weight gradient summed over the micro-batches into a
	// buffer it may share with its parameter's other gradients, so it may
	// take no bytes of its own.
	Pooled
)

// Scales is how Run sizes a graph's memory under any plan: which ops run
// once per micro-batch and how each tensor's instances are divided.
type Scales struct {
	// PerMicroBatch[op]: the op runs once per micro-batch of each
	// replica, and its scratch is divided as a PerSample tensor is (by a
	// stage's replicas × micro-batches).
	PerMicroBatch []bool
	// Tensor[t] is tensor t's scale.
	Tensor []Scale
}

// Scales says how the plans the simulator runs divide its graph's memory
// (see Scales).
func (sm *Simulator) Scales() Scales {
	f := sm.facts()
	g := sm.t.Graph
	s := Scales{PerMicroBatch: slices.Clone(f.perMB), Tensor: make([]Scale, len(g.Tensors))}
	for t := range g.Tensors {
		tn := &g.Tensors[t]
		switch {
		case tn.Kind.IsResident():
			if f.optState[t] {
				s.Tensor[t] = Sharded
			}
		case tn.Producer == graph.NoOp:
			s.Tensor[t] = PerSample
		case f.perStep[t]:
			// A gradient buffer's members other than its leader take no
			// bytes (see gradBuffers and memBytes).
			if f.accum[t] && len(f.consumers[t]) == 1 {
				s.Tensor[t] = Pooled
			}
		default:
			s.Tensor[t] = PerSample
		}
	}
	return s
}
