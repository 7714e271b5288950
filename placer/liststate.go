package placer

import (
	"fmt"

	"github.com/opplace/opplace/graph"
	"github.com/opplace/opplace/sim"
)

// listState is the bookkeeping shared by list-scheduling placers: where
// each scheduled op runs and ends, when each device is free, which tensors
// each device holds and how much memory that takes, and which device each
// colocation class went to.
type listState struct {
	p      *Problem
	g      *graph.Graph
	nd     int
	pos    []int32 // topological position
	lim    *limits
	one    [][]int            // one[d] is []int{d}
	inputs [][]graph.TensorID // distinct inputs of each op

	// fresh collects ops that became ready (all predecessors scheduled)
	// since the caller last drained it, in topological order at the start
	// and in successor order after each schedule.
	fresh     []graph.OpID
	predsLeft []int32
	dev       []int
	end       []float64
	devFree   []float64
	used      []int64
	classDev  []int
	// held records which device holds a copy of which tensor (resident,
	// graph input or received activation) and, for activations, when the
	// copy arrives.
	held map[int64]float64
	// consumersLeft counts each tensor's consumers not yet scheduled.
	consumersLeft []int32
	isOutput      []bool
	order         []graph.OpID
}

func newListState(p *Problem) (*listState, error) {
	g := p.Graph
	n, nd := len(g.Ops), p.Costs.NumDevices()
	lim, err := newLimits(p)
	if err != nil {
		return nil, err
	}
	s := &listState{
		p: p, g: g, nd: nd, lim: lim,
		pos:           make([]int32, n),
		inputs:        make([][]graph.TensorID, n),
		predsLeft:     make([]int32, n),
		dev:           make([]int, n),
		end:           make([]float64, n),
		devFree:       make([]float64, nd),
		used:          make([]int64, nd),
		classDev:      make([]int, len(lim.allowed)),
		held:          map[int64]float64{},
		consumersLeft: make([]int32, len(g.Tensors)),
		isOutput:      make([]bool, len(g.Tensors)),
	}
	for d := 0; d < nd; d++ {
		s.one = append(s.one, []int{d})
	}
	for i := range s.classDev {
		s.classDev[i] = -1
	}
	for i, op := range p.Order {
		s.pos[op] = int32(i)
	}
	for _, o := range g.Outputs {
		s.isOutput[o] = true
	}
	for i := range g.Ops {
		ins := g.Ops[i].Inputs
		for k, in := range ins {
			if !containsTensor(ins[:k], in) {
				s.inputs[i] = append(s.inputs[i], in)
				s.consumersLeft[in]++
			}
		}
		s.predsLeft[i] = int32(len(p.Adj.Preds(graph.OpID(i))))
		s.dev[i] = -1
	}
	for _, op := range p.Order {
		if s.predsLeft[op] == 0 {
			s.fresh = append(s.fresh, op)
		}
	}
	return s, nil
}

func containsTensor(ts []graph.TensorID, t graph.TensorID) bool {
	for _, x := range ts {
		if x == t {
			return true
		}
	}
	return false
}

func (s *listState) key(t graph.TensorID, d int) int64 { return int64(t)*int64(s.nd) + int64(d) }

// candidates lists the devices op may run on now: its class's device if
// the class is placed, else every device the class allows.
func (s *listState) candidates(op graph.OpID) []int {
	if d := s.classDev[s.lim.class[op]]; d >= 0 {
		return s.one[d]
	}
	return s.lim.devices(op)
}

// eligible reports whether op may still run on device d.
func (s *listState) eligible(op graph.OpID, d int) bool {
	if cd := s.classDev[s.lim.class[op]]; cd >= 0 {
		return cd == d
	}
	return s.lim.allows(op, d)
}

// dataReady is when every input of op could be on device d.
func (s *listState) dataReady(op graph.OpID, d int) float64 {
	var t float64
	for _, in := range s.inputs[op] {
		pr := s.g.Tensors[in].Producer
		if pr == graph.NoOp {
			continue
		}
		switch pd := s.dev[pr]; {
		case pd == d:
			t = max(t, s.end[pr])
		default:
			if at, ok := s.held[s.key(in, d)]; ok {
				t = max(t, at)
			} else {
				t = max(t, s.end[pr]+s.p.Costs.Transfer(pd, d, s.g.Tensors[in].Bytes()))
			}
		}
	}
	for _, c := range s.g.Ops[op].ControlDeps {
		t = max(t, s.end[c])
	}
	return t
}

// need is the memory op would add on device d at the moment it runs.
func (s *listState) need(op graph.OpID, d int) int64 {
	b := s.p.Costs.OutputBytes(op) + s.p.Costs.TempBytes(op)
	for _, in := range s.inputs[op] {
		tn := &s.g.Tensors[in]
		if tn.Producer != graph.NoOp && s.dev[tn.Producer] == d {
			continue
		}
		if _, ok := s.held[s.key(in, d)]; !ok {
			b += tn.Bytes()
		}
	}
	return b
}

func (s *listState) fits(op graph.OpID, d int) bool {
	return s.used[d]+s.need(op, d) <= s.p.Costs.Cluster.Devices[d].Memory
}

// schedule commits op to device d starting at start. Placers that insert
// ops into idle gaps (HEFT) may start an op before the device's last end.
func (s *listState) schedule(op graph.OpID, d int, start float64) {
	g, costs := s.g, s.p.Costs
	s.dev[op] = d
	s.classDev[s.lim.class[op]] = d
	s.end[op] = start + costs.OpTime(op, d)
	s.devFree[d] = max(s.devFree[d], s.end[op])
	s.order = append(s.order, op)
	for _, in := range s.inputs[op] {
		tn := &g.Tensors[in]
		local := tn.Producer != graph.NoOp && s.dev[tn.Producer] == d
		if _, ok := s.held[s.key(in, d)]; !ok && !local {
			at := 0.0
			if tn.Producer != graph.NoOp {
				pd := s.dev[tn.Producer]
				at = s.end[tn.Producer] + costs.Transfer(pd, d, tn.Bytes())
			}
			s.held[s.key(in, d)] = at
			s.used[d] += tn.Bytes()
		}
	}
	s.used[d] += costs.OutputBytes(op)
	for _, in := range s.inputs[op] {
		s.consumersLeft[in]--
		if s.consumersLeft[in] == 0 {
			s.release(in)
		}
	}
	for _, out := range g.Ops[op].Outputs {
		if s.consumersLeft[out] == 0 {
			s.release(out)
		}
	}
	for _, succ := range s.p.Adj.Succs(op) {
		s.predsLeft[succ]--
		if s.predsLeft[succ] == 0 {
			s.fresh = append(s.fresh, succ)
		}
	}
}

// release frees every copy of a tensor whose consumers are all scheduled,
// except graph outputs and resident tensors.
func (s *listState) release(t graph.TensorID) {
	tn := &s.g.Tensors[t]
	if tn.Kind.IsResident() || s.isOutput[t] {
		return
	}
	b := tn.Bytes()
	if tn.Producer != graph.NoOp {
		s.used[s.dev[tn.Producer]] -= b
	}
	for d := 0; d < s.nd; d++ {
		if _, ok := s.held[s.key(t, d)]; ok {
			s.used[d] -= b
			delete(s.held, s.key(t, d))
		}
	}
}

// readyOps lists the unscheduled ops whose predecessors are all
// scheduled, in topological order.
func (s *listState) readyOps() []graph.OpID {
	var r []graph.OpID
	for _, op := range s.p.Order {
		if s.dev[op] < 0 && s.predsLeft[op] == 0 {
			r = append(r, op)
		}
	}
	return r
}

// stuck explains why no ready op fits any device; ready may be nil.
func (s *listState) stuck(ready []graph.OpID) error {
	if ready == nil {
		ready = s.readyOps()
	}
	op := ready[0]
	for _, r := range ready {
		if s.pos[r] < s.pos[op] {
			op = r
		}
	}
	return s.noRoom(op)
}

// noRoom explains that op fits none of its devices.
func (s *listState) noRoom(op graph.OpID) error {
	best := -1
	for _, d := range s.candidates(op) {
		if best < 0 || s.p.Costs.Cluster.Devices[d].Memory-s.used[d]-s.need(op, d) > s.p.Costs.Cluster.Devices[best].Memory-s.used[best]-s.need(op, best) {
			best = d
		}
	}
	dev := s.p.Costs.Cluster.Devices[best]
	return Infeasible(s.p, fmt.Sprintf("after placing %d of %d ops, op %q needs %s more on %s, which has %s free",
		len(s.order), len(s.g.Ops), s.g.Ops[op].Name, FormatBytes(s.need(op, best)), dev.Name, FormatBytes(dev.Memory-s.used[best])))
}

// placement returns the devices and the scheduling order as priorities.
func (s *listState) placement() sim.Placement {
	prio := make([]int32, len(s.g.Ops))
	for i, op := range s.order {
		prio[op] = int32(i)
	}
	return sim.Placement{Device: s.dev, Priority: prio}
}
