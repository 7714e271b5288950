package placer

import (
	"github.com/opplace/opplace/cost"
	"github.com/opplace/opplace/graph"
	"github.com/opplace/opplace/sim"
)

// Finest is the finest division of a step's memory that the plans of a
// space make, where Infeasible takes its memory bound: a bound taken
// there holds for every plan of the space, however it cuts the batch into
// replicas and micro-batches and the ops over tensor-parallel groups. A
// nil *Finest divides nothing: every op runs the whole batch on one
// device, as in a placement.
type Finest struct {
	// Scales says how plans divide each tensor and each op's scratch
	// (sim.Simulator.Scales).
	Scales sim.Scales
	// Samples divides a sim.PerSample tensor and a per-micro-batch op's
	// scratch: the most pieces a plan cuts one step's batch into on one
	// device (replicas × micro-batches × tensor-group members); 0 when no
	// limit is known (a tensor is then taken at 1 byte).
	Samples int64
	// Tensor divides the other tensors and scratch: the largest
	// tensor-parallel group.
	Tensor int
	// Shard divides sim.Sharded tensors (optimizer state): the most
	// devices ZeRO and a tensor group share one among.
	Shard int
	// Words says where the bound is taken, for the message ("at one
	// sample per micro-batch ...").
	Words string
}

// divide is b over k rounded up, as the simulator sizes a share; k <= 0
// is a division without a known limit: 1 byte of anything.
func divide(b, k int64) int64 {
	switch {
	case b <= 0:
		return 0
	case k <= 0:
		return 1
	}
	return (b + k - 1) / k
}

// Bytes is the least size of tensor t's instance that a plan of the space
// holds on a device that holds it.
func (f *Finest) Bytes(g *graph.Graph, t graph.TensorID) int64 {
	b := g.Tensors[t].Bytes()
	if f == nil {
		return b
	}
	switch f.Scales.Tensor[t] {
	case sim.PerSample:
		return divide(b, f.Samples)
	case sim.Sharded:
		return divide(b, int64(max(1, f.Shard)))
	case sim.Pooled:
		return 0
	}
	return divide(b, int64(max(1, f.Tensor)))
}

// Temp is the least scratch a run of op takes on a device.
func (f *Finest) Temp(t *cost.Table, op graph.OpID) int64 {
	b := t.TempBytes(op)
	switch {
	case f == nil:
		return b
	case f.Scales.PerMicroBatch[op]:
		return divide(b, f.Samples)
	}
	return divide(b, int64(max(1, f.Tensor)))
}

// WorkingSet is the least memory op needs on a device of a plan of the
// space while it runs: its distinct inputs, its outputs and its scratch,
// each at its finest division (the simulator allocates an op's outputs
// and scratch as it starts, while it still holds what it reads).
// Resident is the part of it that is the op's resident inputs.
func (f *Finest) WorkingSet(t *cost.Table, op graph.OpID) (ws, resident int64) {
	g := t.Graph
	o := &g.Ops[op]
	for i, in := range o.Inputs {
		if repeated(o.Inputs[:i], in) {
			continue
		}
		b := f.Bytes(g, in)
		ws += b
		if g.Tensors[in].Kind.IsResident() {
			resident += b
		}
	}
	for _, out := range o.Outputs {
		ws += f.Bytes(g, out)
	}
	return ws + f.Temp(t, op), resident
}

func repeated(list []graph.TensorID, t graph.TensorID) bool {
	for _, x := range list {
		if x == t {
			return true
		}
	}
	return false
}

// InfeasibleAt builds the error for problem p with the given detail, its
// memory bound taken at the division f (nil: none, the bound of
// placements). Need is every resident tensor (parameter, constant,
// optimizer state) once, whole, which the devices together hold however
// a plan shards it, plus the most any op's other inputs, outputs and
// scratch take at f; the largest op is the one whose working set at f is
// the largest. Proved is set when either exceeds what the cluster, or its
// largest device, holds.
func InfeasibleAt(p *Problem, detail string, f *Finest) *InfeasibleError {
	g, c := p.Graph, p.Costs.Cluster
	e := &InfeasibleError{Have: c.TotalMemory(), Detail: detail}
	if f != nil {
		e.At = f.Words
	}
	for i := range g.Tensors {
		if g.Tensors[i].Kind.IsResident() && len(g.Tensors[i].Consumers) > 0 {
			e.Need += g.Tensors[i].Bytes()
		}
	}
	largest := graph.OpID(-1)
	var transient int64
	for i := range g.Ops {
		ws, res := f.WorkingSet(p.Costs, graph.OpID(i))
		if largest < 0 || ws > e.LargestOpBytes {
			largest, e.LargestOpBytes = graph.OpID(i), ws
		}
		transient = max(transient, ws-res)
	}
	if largest >= 0 {
		e.LargestOp = g.Ops[largest].Name
	}
	e.Need += transient
	for _, d := range c.Devices {
		e.LargestDevice = max(e.LargestDevice, d.Memory)
	}
	e.Proved = e.Need > e.Have || e.LargestOpBytes > e.LargestDevice
	return e
}
