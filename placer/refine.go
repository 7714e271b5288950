package placer

import (
	"cmp"
	"context"
	"errors"
	"fmt"
	"slices"

	"github.com/opplace/opplace/graph"
	"github.com/opplace/opplace/sim"
)

// DefaultRefineWork is the work Refine spends when its options set none:
// ops simulated, summed over the placements it tries. The simulator
// takes 1.2-2.7 µs an op on the development machine (BenchmarkRefine,
// GNMT), so this is 12-27 s at most: 33,000 placements of a 300-op graph
// (which reach a local optimum long before), 10,000 of a 1,000-op one.
// Auto sets a smaller budget (strategy.AutoRefineWork).
const DefaultRefineWork = 10_000_000

// retryAfter is how many kept moves a failed move waits before it is
// tried again.
const retryAfter = 4

// minRefineTries is the fewest placements worth a search: on a graph so
// large that the work allows fewer, Refine returns ErrTooLarge.
const minRefineTries = 100

// RefineOptions bound a local search.
type RefineOptions struct {
	// Work is the ops simulated over all the placements tried; 0 means
	// DefaultRefineWork. It is work rather than time so that the same
	// inputs give the same plan on any machine.
	Work int64
}

// tries is how many placements the work allows on a graph of n ops, or
// ErrTooLarge.
func (o RefineOptions) tries(n int) (int, error) {
	work := o.Work
	if work <= 0 {
		work = DefaultRefineWork
	}
	budget := int(work / int64(max(n, 1)))
	if budget < minRefineTries {
		return 0, fmt.Errorf("%w: %d ops leave the work budget (%d simulated ops) fewer than %d placements to try", ErrTooLarge, n, work, minRefineTries)
	}
	return budget, nil
}

// Check is ErrTooLarge for a graph of n ops too large to search, nil
// otherwise: a caller can skip what it would do before Refine.
func (o RefineOptions) Check(n int) error {
	_, err := o.tries(n)
	return err
}

// Refined is what a local search found.
type Refined struct {
	Placement sim.Placement
	Sim       *sim.Result
	// StartStep is the simulated step of the placement the search
	// started from; Sim.Step is the refined one.
	StartStep float64
	// Tried counts the placements simulated, Moved the moves kept.
	Tried, Moved int
}

// ErrTooLarge is Refine's error for a graph so large that its work
// budget leaves too few placements to try.
var ErrTooLarge = errors.New("graph too large for the local search")

// Note says what the search did, for a plan's notes.
func (r *Refined) Note(from string) string {
	return fmt.Sprintf("local search from %s's placement: %.3f -> %.3f ms (%d moves kept of %d tried)",
		from, r.StartStep*1e3, r.Sim.Step*1e3, r.Moved, r.Tried)
}

// Refine improves a placement that fits by local search under the judge:
// it follows the simulated step's critical path back from its last op and
// tries moving the colocation class of each op on it (a fused group is one
// op of the graph placed) to another device its class allows, the devices
// its neighbours run on first; the first move that shortens the simulated
// step and keeps every device within its memory is kept, and the search
// starts again from the new critical path. It stops when no move on the
// path helps or the work is spent. Each op keeps its priority, so a moved
// op runs on its new device in the order the list placer gave it.
//
// Every placement it returns was simulated and fits: the judge's memory
// accounting is the only one it uses.
func Refine(ctx context.Context, p *Problem, start sim.Placement, opt RefineOptions) (*Refined, error) {
	lim, err := newLimits(p)
	if err != nil {
		return nil, err
	}
	budget, err := opt.tries(len(p.Graph.Ops))
	if err != nil {
		return nil, err
	}
	judge := sim.New(p.Costs, p.Adj, p.Order)
	cur := sim.Placement{Device: slices.Clone(start.Device), Priority: start.Priority}
	res, err := judge.Run(&sim.Plan{Placement: cur})
	if err != nil {
		return nil, err
	}
	if !p.Fits(res) {
		return nil, fmt.Errorf("local search starts from a placement that fits, and this one does not")
	}
	out := &Refined{StartStep: res.Step}
	members := classMembers(lim.class, len(lim.allowed))
	// curPenalty is what the soft rules add to cur's step; a move is kept
	// when step plus penalty drops.
	var curPenalty float64
	if p.Prefer != nil {
		for op, d := range cur.Device {
			curPenalty += p.Penalty(graph.OpID(op), d)
		}
	}
	nd := p.Costs.NumDevices()
	try := make([]int, 0, nd)
	// failed[c*nd+d] is when moving class c to d last failed. A move that
	// failed is not tried again until retryAfter more moves were kept:
	// most of the path stays as it was after one move, and so do most
	// failures.
	type failure struct{ moved, tried int32 } // 1 + the counts; 0: none
	failed := make([]failure, len(lim.allowed)*nd)
	for out.Tried < budget {
		if err := ctx.Err(); err != nil {
			return nil, err
		}
		moved, skipped := false, false
		round := int32(out.Tried)
		sc := newSchedule(p, cur.Device, res)
	path:
		for _, step := range sc.critical() {
			c := lim.class[step.op]
			from := cur.Device[step.op]
			try = moveTargets(p, lim, members[c], cur.Device, res, try[:0])
			for _, d := range try {
				if out.Tried >= budget {
					break path
				}
				// Only a move that lets the op finish sooner, or that
				// frees the device an op after it on the path waited for,
				// is worth a simulation.
				if !step.blocked && len(members[c]) == 1 && !sc.sooner(step.op, d) {
					continue
				}
				k := int(c)*nd + d
				if f := failed[k]; f.moved > 0 && int(f.moved)-1+retryAfter > out.Moved {
					// Skipped for an earlier round's failure: worth a
					// last try before the search ends.
					skipped = skipped || f.tried-1 < round
					continue
				}
				out.Tried++
				setDevice(cur.Device, members[c], d)
				if !lim.apartOK(cur.Device, nd) {
					setDevice(cur.Device, members[c], from)
					continue
				}
				r, err := judge.Run(&sim.Plan{Placement: cur})
				pen := curPenalty
				if p.Prefer != nil { // only the moved class's ops changed
					for _, op := range members[c] {
						pen += p.Penalty(op, d) - p.Penalty(op, from)
					}
				}
				if err == nil && r.Step+pen < res.Step+curPenalty && p.Fits(r) {
					res, moved, curPenalty = r, true, pen
					out.Moved++
					break path
				}
				failed[k] = failure{int32(out.Moved) + 1, int32(out.Tried)}
				setDevice(cur.Device, members[c], from)
			}
		}
		switch {
		case moved:
		case skipped:
			clear(failed) // a last round that tries every move
		default:
			out.Placement, out.Sim = cur, res
			return out, nil
		}
	}
	out.Placement, out.Sim = cur, res
	return out, nil
}

func setDevice(dev []int, ops []graph.OpID, d int) {
	for _, op := range ops {
		dev[op] = d
	}
}

// classMembers lists each class's ops, ascending.
func classMembers(class []int32, nc int) [][]graph.OpID {
	members := make([][]graph.OpID, nc)
	for op, c := range class {
		members[c] = append(members[c], graph.OpID(op))
	}
	return members
}

// schedule is a simulated placement as the search reads it: the order
// each device ran its ops in, and when each tensor reached each device.
type schedule struct {
	p   *Problem
	dev []int
	res *sim.Result
	// byDev lists each device's ops by start; before[op] is the op its
	// device ran just before it, or -1.
	byDev  [][]graph.OpID
	before []graph.OpID
	// arrival[t*nd+d] is when tensor t reached device d.
	arrival map[int64]float64
}

func newSchedule(p *Problem, dev []int, res *sim.Result) *schedule {
	nd, n := p.Costs.NumDevices(), len(p.Graph.Ops)
	s := &schedule{p: p, dev: dev, res: res, byDev: make([][]graph.OpID, nd), before: make([]graph.OpID, n), arrival: map[int64]float64{}}
	for _, tr := range res.Transfers {
		k := int64(tr.Tensor)*int64(nd) + int64(tr.To)
		if _, ok := s.arrival[k]; !ok {
			s.arrival[k] = tr.End
		}
	}
	for op := range n {
		s.byDev[dev[op]] = append(s.byDev[dev[op]], graph.OpID(op))
	}
	// By start, then end (ops of no time run at an instant, before an op
	// starting then), then topological position: so each op's device
	// predecessor, like its data ones, comes before it in (start,
	// position), and the walk back along the critical path ends.
	pos := make([]int32, n)
	for i, op := range p.Order {
		pos[op] = int32(i)
	}
	for _, ops := range s.byDev {
		slices.SortFunc(ops, func(a, b graph.OpID) int {
			if c := cmp.Compare(res.Start[a], res.Start[b]); c != 0 {
				return c
			}
			if c := cmp.Compare(res.End[a], res.End[b]); c != 0 {
				return c
			}
			return cmp.Compare(pos[a], pos[b])
		})
		for i, op := range ops {
			s.before[op] = -1
			if i > 0 {
				s.before[op] = ops[i-1]
			}
		}
	}
	return s
}

// pathStep is an op on the critical path; blocked says the op after it
// on the path waited for its device, not for its data.
type pathStep struct {
	op      graph.OpID
	blocked bool
}

// critical lists the ops on the simulated step's critical path, from the
// last op back, one per colocation class: the op that ends last, then
// repeatedly whatever the op waited for, the latest of its inputs to
// arrive (its producer, when the input crossed from another device) or
// the op its device ran before it.
func (s *schedule) critical() []pathStep {
	g, res, nd := s.p.Graph, s.res, s.p.Costs.NumDevices()
	last := graph.OpID(-1)
	for op := range g.Ops {
		if last < 0 || res.End[op] > res.End[last] {
			last = graph.OpID(op)
		}
	}
	var path []pathStep
	blocked := false
	for v := last; v >= 0; {
		path = append(path, pathStep{v, blocked})
		next, ready := s.before[v], -1.0
		blocked = next >= 0
		if blocked {
			ready = res.End[next]
		}
		for _, in := range g.Ops[v].Inputs {
			u := g.Tensors[in].Producer
			if u == graph.NoOp {
				continue
			}
			at := res.End[u]
			if s.dev[u] != s.dev[v] {
				if a, ok := s.arrival[int64(in)*int64(nd)+int64(s.dev[v])]; ok {
					at = a
				}
			}
			if at > ready {
				next, ready, blocked = u, at, false
			}
		}
		for _, u := range g.Ops[v].ControlDeps {
			if res.End[u] > ready {
				next, ready, blocked = u, res.End[u], false
			}
		}
		if ready <= 0 {
			break
		}
		v = next
	}
	return path
}

// sooner estimates whether op v would finish before its simulated end on
// device d: its inputs arrive there over free links (or when a copy
// already did), and it takes the first idle gap of d long enough after
// that.
func (s *schedule) sooner(v graph.OpID, d int) bool {
	g, t, res, nd := s.p.Graph, s.p.Costs, s.res, s.p.Costs.NumDevices()
	var ready float64
	for _, in := range g.Ops[v].Inputs {
		u := g.Tensors[in].Producer
		if u == graph.NoOp {
			continue
		}
		at := res.End[u]
		if pd := s.dev[u]; pd != d {
			if a, ok := s.arrival[int64(in)*int64(nd)+int64(d)]; ok {
				at = a
			} else {
				at += t.TensorTransfer(in, pd, d)
			}
		}
		ready = max(ready, at)
	}
	for _, u := range g.Ops[v].ControlDeps {
		ready = max(ready, res.End[u])
	}
	dur := t.OpTime(v, d)
	start := ready
	for _, op := range s.byDev[d] {
		if res.End[op] <= start {
			continue
		}
		if res.Start[op] >= start+dur {
			break
		}
		start = res.End[op]
	}
	return start+dur < res.End[v]
}

// moveTargets lists the devices to try for a class, other than its own:
// those its members' producers and consumers run on, most bytes exchanged
// first, then the least busy device; only devices the class allows.
func moveTargets(p *Problem, lim *limits, ops []graph.OpID, dev []int, res *sim.Result, out []int) []int {
	g, nd := p.Graph, p.Costs.NumDevices()
	own := dev[ops[0]]
	bytes := make([]int64, nd)
	for _, op := range ops {
		for _, in := range g.Ops[op].Inputs {
			if u := g.Tensors[in].Producer; u != graph.NoOp {
				bytes[dev[u]] += g.Tensors[in].Bytes()
			}
		}
		for _, o := range g.Ops[op].Outputs {
			for _, c := range g.Tensors[o].Consumers {
				bytes[dev[c]] += g.Tensors[o].Bytes()
			}
		}
	}
	allowed := lim.allowed[lim.class[ops[0]]]
	for _, d := range allowed {
		if d != own && bytes[d] > 0 {
			out = append(out, d)
		}
	}
	slices.SortStableFunc(out, func(a, b int) int {
		switch {
		case bytes[a] > bytes[b]:
			return -1
		case bytes[a] < bytes[b]:
			return 1
		}
		return a - b
	})
	idle := -1
	for _, d := range allowed {
		if d != own && !slices.Contains(out, d) && (idle < 0 || res.Busy[d] < res.Busy[idle]) {
			idle = d
		}
	}
	if idle >= 0 {
		out = append(out, idle)
	}
	return out
}
