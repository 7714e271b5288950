package sim

import (
	"slices"
	"sync"

	"github.com/opplace/opplace/graph"
)

// facts are what every simulation of one graph in one order shares,
// worked out once per Simulator: read-only while plans are simulated.
type facts struct {
	training bool
	// pos[op] is op's position in the order.
	pos []int32
	// perMB[op]: the op runs once per micro-batch; perStep[t]: the tensor
	// has one instance per step; accum[t]: it is a weight gradient
	// accumulated over micro-batches.
	perMB   []bool
	perStep []bool
	accum   []bool
	// optState[t]: a parameter-like tensor only optimizer updates read
	// (the optimizer's state), which ZeRO shards.
	optState []bool

	// modules[op] numbers the module of each forward op (see
	// Stage.Recompute), worked out at the first recomputing plan.
	modules func() []int32
	// units[op] numbers the module of every op, backward ops included
	// (the module their name begins with, see moduleOfName), -1 for an op
	// outside any module, and the tensors ZeRO-3 gathers. Worked out at
	// the first fully sharded plan (fsdp.go).
	units func() unitFacts

	// bytes[t] is tensor t's size (graph.Tensor.Bytes), which the
	// memory books read at every allocation and release.
	bytes []int64

	consumers [][]graph.OpID     // per tensor, distinct
	inputs    [][]graph.TensorID // per op, distinct
	ctrl      [][]graph.OpID     // per op, distinct control deps
	ctrlSucc  [][]graph.OpID     // per op, ops that list it as a control dep
	isOutput  []bool
}

// newFacts works out what every simulation of g in order shares.
func newFacts(g *graph.Graph, order []graph.OpID) *facts {
	f := &facts{pos: make([]int32, len(g.Ops))}
	for i, op := range order {
		f.pos[op] = int32(i)
	}
	f.dedupe(g)
	f.classify(g, order)
	f.bytes = make([]int64, len(g.Tensors))
	for t := range g.Tensors {
		f.bytes[t] = g.Tensors[t].Bytes()
	}
	f.modules = sync.OnceValue(func() []int32 { return moduleIDs(g) })
	f.units = sync.OnceValue(func() unitFacts { return newUnitFacts(g, f) })
	return f
}

// order is the ops in the order the facts were worked out for.
func (f *facts) order() []graph.OpID {
	out := make([]graph.OpID, len(f.pos))
	for op, i := range f.pos {
		out[i] = graph.OpID(op)
	}
	return out
}

// dedupe builds the distinct consumer, input and control-dependency lists.
func (s *facts) dedupe(g *graph.Graph) {
	stamp := make([]int32, max(len(g.Ops), len(g.Tensors)))
	for i := range stamp {
		stamp[i] = -1
	}
	// Lists without repeats (nearly all) are the graph's own, shared and
	// never written: a copy of each cost the simulator an allocation per
	// tensor and op on every run.
	s.consumers = make([][]graph.OpID, len(g.Tensors))
	for t := range g.Tensors {
		s.consumers[t] = distinct(g.Tensors[t].Consumers, stamp, int32(t))
	}
	for i := range stamp {
		stamp[i] = -1
	}
	s.inputs = make([][]graph.TensorID, len(g.Ops))
	s.ctrl = make([][]graph.OpID, len(g.Ops))
	s.ctrlSucc = make([][]graph.OpID, len(g.Ops))
	for op := range g.Ops {
		s.inputs[op] = distinct(g.Ops[op].Inputs, stamp, int32(op))
	}
	for op := range g.Ops {
		deps := slices.Clone(g.Ops[op].ControlDeps)
		slices.Sort(deps)
		s.ctrl[op] = slices.Compact(deps)
		for _, d := range s.ctrl[op] {
			s.ctrlSucc[d] = append(s.ctrlSucc[d], graph.OpID(op))
		}
	}
	s.isOutput = make([]bool, len(g.Tensors))
	for _, o := range g.Outputs {
		s.isOutput[o] = true
	}
}

// classify decides which ops run per micro-batch and which tensors have
// one instance per step.
func (s *facts) classify(g *graph.Graph, order []graph.OpID) {
	hasInput := false
	for t := range g.Tensors {
		if g.Tensors[t].Kind == graph.Input && len(s.consumers[t]) > 0 {
			hasInput = true
			break
		}
	}
	s.perMB = make([]bool, len(g.Ops))
	for _, op := range order {
		o := &g.Ops[op]
		switch {
		case o.Phase == graph.Backward:
			s.training = true
			s.perMB[op] = true
		case o.Phase == graph.Update:
		case !hasInput:
			s.perMB[op] = true
		default:
			for _, in := range s.inputs[op] {
				tn := &g.Tensors[in]
				if tn.Kind == graph.Input || tn.Producer != graph.NoOp && s.perMB[tn.Producer] {
					s.perMB[op] = true
					break
				}
			}
			for _, d := range s.ctrl[op] {
				s.perMB[op] = s.perMB[op] || s.perMB[d]
			}
		}
	}
	s.perStep = make([]bool, len(g.Tensors))
	s.accum = make([]bool, len(g.Tensors))
	for t := range g.Tensors {
		tn := &g.Tensors[t]
		if tn.Producer == graph.NoOp || !s.perMB[tn.Producer] {
			s.perStep[t] = true
			continue
		}
		if tn.Kind != graph.Activation || len(s.consumers[t]) == 0 {
			continue
		}
		weightGrad := true
		for _, c := range s.consumers[t] {
			if g.Ops[c].Phase != graph.Update {
				weightGrad = false
				break
			}
		}
		s.accum[t], s.perStep[t] = weightGrad, weightGrad
	}
	s.optState = make([]bool, len(g.Tensors))
	for t := range g.Tensors {
		tn := &g.Tensors[t]
		if tn.Kind != graph.Parameter || len(s.consumers[t]) == 0 {
			continue
		}
		s.optState[t] = !slices.ContainsFunc(s.consumers[t], func(c graph.OpID) bool { return g.Ops[c].Phase != graph.Update })
	}
}

// distinct is list without its repeats: list itself when it has none,
// else a copy. stamp[x] == mark marks x as seen; mark must be new.
func distinct[T ~int32](list []T, stamp []int32, mark int32) []T {
	for i, x := range list {
		if stamp[x] == mark {
			out := slices.Clone(list[:i])
			for _, y := range list[i:] {
				if stamp[y] != mark {
					stamp[y] = mark
					out = append(out, y)
				}
			}
			return out
		}
		stamp[x] = mark
	}
	return list
}
