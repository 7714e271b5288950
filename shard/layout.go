package shard

import (
	"fmt"

	"github.com/opplace/opplace/sim"
)

// Layout is how the members of a tensor-parallel group hold one tensor:
// every member the whole tensor (Replicated), each member 1/t of one axis
// (a Layout >= 0 is that axis: S(a)), or every member a whole-sized
// partial sum that adds up to the tensor (Partial).
type Layout int8

const (
	// Replicated (R): every member holds the whole tensor.
	Replicated Layout = -1
	// Partial (P): every member holds a whole-sized addend of the tensor,
	// as a row-parallel matmul leaves its output before the all-reduce.
	Partial Layout = -2
	// anyLayout is a requirement met by every layout without conversion
	// (Shape reads only the dimensions); never a tensor's layout.
	anyLayout Layout = -3
)

// Split is the layout S(axis).
func Split(axis int) Layout { return Layout(axis) }

// IsSplit reports whether l is S(a) for some axis a.
func (l Layout) IsSplit() bool { return l >= 0 }

func (l Layout) String() string {
	switch {
	case l == Replicated:
		return "R"
	case l == Partial:
		return "P"
	case l == anyLayout:
		return "any"
	case l >= 0:
		return fmt.Sprintf("S(%d)", int(l))
	}
	return fmt.Sprintf("Layout(%d)", int8(l))
}

// conversion is the collective that turns a tensor held in layout from
// into layout to, and whether one is needed at all. R to S is free (each
// member keeps its slice); S(a) to S(b) is priced as an all-gather
// followed by a free slice (an all-to-all moves less, but the simulator
// has no such collective).
func conversion(from, to Layout) (sim.CollectiveKind, bool) {
	switch {
	case from == to, to == anyLayout, from == anyLayout, from == Replicated:
		return "", false
	case from == Partial && to == Replicated:
		return sim.AllReduce, true
	case from == Partial && to.IsSplit():
		return sim.ReduceScatter, true
	case from.IsSplit() && (to == Replicated || to.IsSplit()):
		return sim.AllGather, true
	}
	// Nothing requires a partial sum: a member could zero its copy, free.
	return "", false
}

// dual is the layout the gradient of a tensor held in layout l must have
// where l's producer consumes it in the backward pass: the gradient of a
// partial sum is the whole gradient every addend receives (Megatron's
// "g": no backward collective), of a replicated tensor the replicated
// gradient, of a slice the slice.
func dual(l Layout) Layout {
	if l == Partial {
		return Replicated
	}
	return l
}
