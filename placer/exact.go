package placer

import (
	"context"
	"errors"
	"math"
	"slices"

	"github.com/opplace/opplace/graph"
	"github.com/opplace/opplace/sim"
)

// Exact is a branch-and-bound search for the best placement in the
// simulator's own terms, the reference the gap-to-optimum benchmark
// measures heuristics against. Its space is every assignment of a device
// to each unit (by default each colocation class; Units coarser ones),
// each scored by sim.Simulate with the simulator's default order (no
// Priority: each device runs its ready ops in topological order). It is
// exact for that space when Proven: no placement of the units that fits
// memory has a shorter simulated step. A placer that also chooses the
// order on each device (heft, m-etf, m-sct, ilp set Priority) searches a
// larger space and may beat it.
//
// Units are assigned in topological order of their first op; a partial
// assignment is pruned when a lower bound on the simulated step of every
// completion reaches the best step found: the longest path with assigned
// ops at their device's time and transfers between assigned ops on
// different devices, unassigned ops at their fastest time and free
// transfers; the busiest device's assigned work; and all work, unassigned
// ops at their fastest, spread over every device. Devices of one type,
// memory and links are interchangeable, so a unit opens at most the
// first unused one of them.
type Exact struct {
	// Units are the groups placed whole; nil means the colocation classes.
	// Each must hold whole colocation classes.
	Units *Groups
	// MaxNodes bounds the search's nodes; 0 means DefaultExactNodes.
	MaxNodes int
	// Start are placements whose step starts the search as its best, when
	// they keep every unit whole on an allowed device.
	Start []sim.Placement
}

// DefaultExactNodes bounds Exact's search by nodes, so that its answer is
// the same on every machine.
const DefaultExactNodes = 1 << 20

// ExactResult is Exact's best placement and whether it is proven.
type ExactResult struct {
	Placement sim.Placement
	Step      float64
	// Proven says the search finished: no placement of the units has a
	// shorter step. False when MaxNodes stopped it.
	Proven bool
	Nodes  int
	Units  int
}

// errExactApart refuses separate rules, which the search does not model.
var errExactApart = errors.New("the exact search does not support separate rules")

// Search runs the branch and bound.
func (e *Exact) Search(ctx context.Context, p *Problem) (*ExactResult, error) {
	if len(p.Apart) > 0 {
		return nil, errExactApart
	}
	lim, err := newLimits(p)
	if err != nil {
		return nil, err
	}
	g, t := p.Graph, p.Costs
	n, nd := len(g.Ops), t.NumDevices()
	unitOf := make([]int32, n)
	var members [][]graph.OpID
	if e.Units == nil {
		copy(unitOf, lim.class)
		members = make([][]graph.OpID, len(lim.allowed))
		for op, c := range lim.class {
			members[c] = append(members[c], graph.OpID(op))
		}
	} else {
		copy(unitOf, e.Units.Of)
		members = e.Units.Members
		classUnit := make([]int32, len(lim.allowed))
		for c := range classUnit {
			classUnit[c] = -1
		}
		for op, c := range lim.class {
			if classUnit[c] >= 0 && classUnit[c] != unitOf[op] {
				return nil, errors.New("the exact search's units split a colocation class")
			}
			classUnit[c] = unitOf[op]
		}
	}
	nu := len(members)
	allowed := make([][]int, nu)
	for u, ms := range members {
		allowed[u] = lim.devices(ms[0])
		for _, op := range ms[1:] {
			allowed[u] = intersect(allowed[u], lim.devices(op))
		}
		if len(allowed[u]) == 0 {
			return nil, Infeasible(p, "the exact search's units allow no common device")
		}
	}
	pos := make([]int, n)
	for i, op := range p.Order {
		pos[op] = i
	}
	// Units in topological order of their first op.
	units := make([]int32, nu)
	first := make([]int, nu)
	for u, ms := range members {
		units[u] = int32(u)
		first[u] = n
		for _, op := range ms {
			first[u] = min(first[u], pos[op])
		}
	}
	slices.SortFunc(units, func(a, b int32) int { return first[a] - first[b] })
	fastest := make([]float64, n)
	for op := range fastest {
		fastest[op] = math.Inf(1)
		for _, d := range allowed[unitOf[op]] {
			fastest[op] = min(fastest[op], t.OpTime(graph.OpID(op), d))
		}
	}
	s := &exactSearch{p: p, unitOf: unitOf, members: members, allowed: allowed, units: units, fastest: fastest,
		dev: make([]int, n), unitDev: make([]int, nu), fin: make([]float64, n), load: make([]float64, nd),
		max: e.MaxNodes, best: math.Inf(1), ctx: ctx}
	if s.max <= 0 {
		s.max = DefaultExactNodes
	}
	for i := range s.dev {
		s.dev[i] = -1
	}
	for u := range s.unitDev {
		s.unitDev[u] = -1
	}
	s.swap = symmetric(p, allowed)
	for _, st := range e.Start {
		if !s.inSpace(st.Device) {
			continue
		}
		pl := sim.Placement{Device: slices.Clone(st.Device)}
		if res, err := p.Simulate(pl); err == nil && p.Fits(res) && res.Step < s.best {
			s.best, s.bestPl = res.Step, pl
		}
	}
	if err := s.branch(0); err != nil {
		return nil, err
	}
	if s.bestPl.Device == nil {
		return nil, Infeasible(p, "the exact search found no placement of its units that fits")
	}
	return &ExactResult{Placement: s.bestPl, Step: s.best, Proven: !s.stopped, Nodes: s.nodes, Units: nu}, nil
}

type exactSearch struct {
	p       *Problem
	unitOf  []int32
	members [][]graph.OpID
	allowed [][]int
	units   []int32 // in branching order
	fastest []float64
	// swap[d] is the device class of d when devices are interchangeable
	// (-1 where symmetry is not used).
	swap    []int
	dev     []int // per op, -1 unassigned
	unitDev []int
	fin     []float64
	load    []float64
	nodes   int
	max     int
	stopped bool
	best    float64
	bestPl  sim.Placement
	ctx     context.Context
}

// inSpace reports whether dev keeps every unit whole on an allowed device.
func (s *exactSearch) inSpace(dev []int) bool {
	if len(dev) != len(s.unitOf) {
		return false
	}
	for u, ms := range s.members {
		d := dev[ms[0]]
		if !slices.Contains(s.allowed[u], d) {
			return false
		}
		for _, op := range ms[1:] {
			if dev[op] != d {
				return false
			}
		}
	}
	return true
}

// symmetric returns each device's class of interchangeable devices (the
// class's first device; see interchangeableDevices, with every device's
// memory as its capacity), or nil when some unit may not use every
// device, where renaming devices could break a restriction.
func symmetric(p *Problem, allowed [][]int) []int {
	t := p.Costs
	nd := t.NumDevices()
	for _, a := range allowed {
		if len(a) != nd {
			return nil
		}
	}
	capacity := make([]float64, nd)
	for d := range capacity {
		capacity[d] = float64(t.Cluster.Devices[d].Memory)
	}
	class := make([]int, nd)
	for _, c := range interchangeableDevices(t, capacity, nil) {
		for _, d := range c {
			class[d] = c[0]
		}
	}
	return class
}

// ready is the earliest op may start on device d: its producers'
// finishes, plus the transfer from each placed one on another device.
func (s *exactSearch) ready(op graph.OpID, d int) float64 {
	g := s.p.Graph
	var start float64
	for _, in := range g.Ops[op].Inputs {
		from := g.Tensors[in].Producer
		if from == graph.NoOp {
			continue
		}
		arrive := s.fin[from]
		if e := s.dev[from]; e >= 0 && e != d {
			arrive += s.p.Costs.TensorTransfer(in, e, d)
		}
		start = max(start, arrive)
	}
	return start
}

// bound is a lower bound on the simulated step of every completion of the
// current assignment (see Exact).
func (s *exactSearch) bound() float64 {
	p := s.p
	t := p.Costs
	clear(s.load)
	var free, path float64
	for _, op := range p.Order {
		d := s.dev[op]
		if d < 0 {
			// Unplaced: the earliest finish on any device it may use,
			// paying transfers from its placed producers.
			s.fin[op] = math.Inf(1)
			for _, e := range s.allowed[s.unitOf[op]] {
				s.fin[op] = min(s.fin[op], s.ready(op, e)+t.OpTime(op, e))
			}
			free += s.fastest[op]
		} else {
			dur := t.OpTime(op, d)
			s.load[d] += dur
			s.fin[op] = s.ready(op, d) + dur
		}
		path = max(path, s.fin[op])
	}
	var busy, all float64
	for _, l := range s.load {
		busy = max(busy, l)
		all += l
	}
	return max(path, busy, (all+free)/float64(len(s.load)))
}

func (s *exactSearch) set(u int32, d int) {
	s.unitDev[u] = d
	for _, op := range s.members[u] {
		s.dev[op] = d
	}
}

// branch assigns the k-th unit of the branching order.
func (s *exactSearch) branch(k int) error {
	s.nodes++
	if s.nodes > s.max {
		s.stopped = true
		return nil
	}
	if s.nodes%1024 == 0 {
		if err := s.ctx.Err(); err != nil {
			return err
		}
	}
	if k == len(s.units) {
		pl := sim.Placement{Device: slices.Clone(s.dev)}
		res, err := s.p.Simulate(pl)
		if err != nil {
			return err
		}
		if s.p.Fits(res) && res.Step < s.best {
			s.best, s.bestPl = res.Step, pl
		}
		return nil
	}
	u := s.units[k]
	type child struct {
		d  int
		lb float64
	}
	var kids []child
	for _, d := range s.allowed[u] {
		if s.swap != nil && s.opensLater(d) {
			continue
		}
		s.set(u, d)
		if lb := s.bound(); lb < s.best {
			kids = append(kids, child{d, lb})
		}
	}
	s.set(u, -1)
	slices.SortStableFunc(kids, func(a, b child) int {
		switch {
		case a.lb < b.lb:
			return -1
		case a.lb > b.lb:
			return 1
		}
		return 0
	})
	for _, c := range kids {
		if c.lb >= s.best || s.stopped {
			continue
		}
		s.set(u, c.d)
		err := s.branch(k + 1)
		s.set(u, -1)
		if err != nil {
			return err
		}
	}
	return nil
}

// opensLater reports whether d is an unused device with an unused
// interchangeable device of lower index: placing there only renames a
// placement the search tries anyway.
func (s *exactSearch) opensLater(d int) bool {
	if s.used(d) {
		return false
	}
	for e := 0; e < d; e++ {
		if s.swap[e] == s.swap[d] && !s.used(e) {
			return true
		}
	}
	return false
}

func (s *exactSearch) used(d int) bool { return slices.Contains(s.unitDev, d) }
