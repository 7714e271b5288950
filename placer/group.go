package placer

import (
	"fmt"
	"slices"

	"github.com/opplace/opplace/graph"
)

// Groups partitions a graph's ops into placement units, Baechi's
// co-placement: ops of one colocation group are merged, and an op with a
// single consumer joins its consumer's group, each merge made only when
// the graph of groups stays acyclic, the ops keep a device in common and
// the group stays within half the smallest device's memory.
// Colocation groups a merge would make cyclic (a forward op and its
// gradient) stay apart and remain a device constraint on the placers.
type Groups struct {
	// Of is each op's group; groups are numbered by their smallest op ID.
	Of []int32
	// Members lists each group's ops in ascending ID order.
	Members [][]graph.OpID
	// Colocated counts ops merged into a colocation partner; CoPlaced
	// counts ops merged into their single consumer; Kept counts
	// colocation merges skipped because they would make a cycle.
	Colocated, CoPlaced, Kept int
}

// Len is the number of groups.
func (gs *Groups) Len() int { return len(gs.Members) }

// String summarises the grouping for logs and plans.
func (gs *Groups) String() string {
	s := fmt.Sprintf("%d ops in %d groups (%d merged by colocation, %d into their single consumer)",
		len(gs.Of), len(gs.Members), gs.Colocated, gs.CoPlaced)
	if gs.Kept > 0 {
		s += fmt.Sprintf("; %d colocation merges left as constraints to avoid cycles", gs.Kept)
	}
	return s
}

// dfsBudget bounds the path search that proves a merge acyclic; a merge
// whose proof needs more is skipped, which is always safe.
const dfsBudget = 256

// Group computes the co-placement groups of p. It costs about
// O((ops + edges) log ops) plus a bounded search per colocation merge.
func Group(p *Problem) (*Groups, error) { return group(p, coPlace) }

// How group merges an op into its successor.
const (
	noMerge = iota
	// chains merges u into v only when v is u's only successor and u is
	// v's only predecessor: it never hides parallel branches.
	chains
	// coPlace merges every op into its single consumer (Baechi).
	coPlace
)

// group merges colocation groups, then ops into successors per mode.
func group(p *Problem, mode int) (*Groups, error) {
	lim, err := newLimits(p)
	if err != nil {
		return nil, err
	}
	q := newQuotient(p, lim)
	gs := &Groups{}
	// Colocation first: those ops must share a device anyway.
	first := map[int32]graph.OpID{}
	for i := range p.Graph.Ops {
		op := graph.OpID(i)
		if p.Graph.Ops[i].Colocate == "" {
			continue
		}
		c := lim.class[op]
		f, ok := first[c]
		if !ok {
			first[c] = op
			continue
		}
		switch q.merge(f, op) {
		case merged:
			gs.Colocated++
		case cyclic:
			gs.Kept++
		}
	}
	for _, u := range p.Order {
		s := p.Adj.Succs(u)
		if mode == noMerge || len(s) != 1 || mode == chains && len(p.Adj.Preds(s[0])) != 1 {
			continue
		}
		if q.merge(u, s[0]) == merged {
			gs.CoPlaced++
		}
	}
	gs.Members = q.uf.Groups()
	gs.Of = make([]int32, len(p.Graph.Ops))
	for k, members := range gs.Members {
		for _, op := range members {
			gs.Of[op] = int32(k)
		}
	}
	return gs, nil
}

type mergeResult int

const (
	merged mergeResult = iota
	same               // already one group
	cyclic             // would make a cycle (or the proof ran out of budget)
	apart              // no device allows both, or too big together
)

// quotient is the graph of groups under merging: union-find whose root
// keeps the group's successor and predecessor sets and allowed devices.
type quotient struct {
	uf         *graph.UnionFind[graph.OpID]
	succ, pred []map[int32]struct{}
	allowed    [][]int
	// key is each group's separate-rules key (limits.apartKey): groups
	// with different keys never merge.
	key  []int32
	seen map[int32]bool
	// mem is each root group's memory (outputs, scratch and resident
	// inputs, summed); no merge makes a group bigger than memCap.
	mem    []int64
	memCap int64
}

// unitMemory is what op alone adds to a device: outputs, scratch and the
// parameters and graph inputs it reads.
func unitMemory(p *Problem, op graph.OpID) int64 {
	b := p.Costs.OutputBytes(op) + p.Costs.TempBytes(op)
	for _, in := range p.Graph.Ops[op].Inputs {
		if t := &p.Graph.Tensors[in]; t.Producer == graph.NoOp {
			b += t.Bytes()
		}
	}
	return b
}

// groupMemCap keeps a group within half the smallest device, so groups
// never stop a placer from splitting a model that memory forces apart.
func groupMemCap(p *Problem) int64 {
	c := p.Costs.Cluster.Devices[0].Memory
	for _, d := range p.Costs.Cluster.Devices {
		c = min(c, d.Memory)
	}
	return c / 2
}

func newQuotient(p *Problem, lim *limits) *quotient {
	n := len(p.Graph.Ops)
	q := &quotient{
		uf: graph.NewGrouping(n), succ: make([]map[int32]struct{}, n), pred: make([]map[int32]struct{}, n),
		allowed: make([][]int, n), key: make([]int32, n), seen: map[int32]bool{},
		mem: make([]int64, n), memCap: groupMemCap(p),
	}
	for i := 0; i < n; i++ {
		q.allowed[i] = lim.devices(graph.OpID(i))
		q.key[i] = lim.apartKey(graph.OpID(i))
		q.mem[i] = unitMemory(p, graph.OpID(i))
		q.succ[i] = map[int32]struct{}{}
		q.pred[i] = map[int32]struct{}{}
		for _, s := range p.Adj.Succs(graph.OpID(i)) {
			q.succ[i][int32(s)] = struct{}{}
		}
		for _, s := range p.Adj.Preds(graph.OpID(i)) {
			q.pred[i][int32(s)] = struct{}{}
		}
	}
	return q
}

// reaches reports whether b is reachable from a by a path that does not
// use the direct edge a->b; false with ok=false when the budget ran out.
func (q *quotient) reaches(a, b int32) (found, ok bool) {
	clear(q.seen)
	stack := make([]int32, 0, 16)
	for s := range q.succ[a] {
		if s != b {
			stack = append(stack, s)
		}
	}
	for len(stack) > 0 {
		v := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		if v == b {
			return true, true
		}
		if q.seen[v] {
			continue
		}
		q.seen[v] = true
		if len(q.seen) > dfsBudget {
			return false, false
		}
		for s := range q.succ[v] {
			if !q.seen[s] {
				stack = append(stack, s)
			}
		}
	}
	return false, true
}

// safe reports whether merging groups a and b keeps the quotient acyclic.
func (q *quotient) safe(a, b int32) bool {
	_, ab := q.succ[a][b]
	_, ba := q.succ[b][a]
	switch {
	case ab && (len(q.succ[a]) == 1 || len(q.pred[b]) == 1):
		return true // Baechi's rule: the edge is the only way from a to b
	case ba && (len(q.succ[b]) == 1 || len(q.pred[a]) == 1):
		return true
	}
	f, ok := q.reaches(a, b)
	if !ok || f {
		return false
	}
	f, ok = q.reaches(b, a)
	return ok && !f
}

// merge joins the groups of x and y if that is safe.
func (q *quotient) merge(x, y graph.OpID) mergeResult {
	a, b := int32(q.uf.Find(x)), int32(q.uf.Find(y))
	if a == b {
		return same
	}
	both := intersect(q.allowed[a], q.allowed[b])
	if len(both) == 0 || q.key[a] != q.key[b] {
		return apart
	}
	if q.mem[a]+q.mem[b] > q.memCap {
		return apart
	}
	if !q.safe(a, b) {
		return cyclic
	}
	// The root keeps the larger adjacency; the other's neighbours are
	// renamed.
	if len(q.succ[a])+len(q.pred[a]) < len(q.succ[b])+len(q.pred[b]) {
		a, b = b, a
	}
	q.uf.Link(graph.OpID(b), graph.OpID(a))
	q.allowed[a] = both
	q.mem[a] += q.mem[b]
	contract(q.succ, q.pred, a, b)
	q.allowed[b] = nil
	return merged
}

// contract moves root b's edges onto root a in a quotient graph's
// successor and predecessor sets (per root), drops the edge between them
// and clears b's: what merging b into a does to the adjacency.
func contract(succ, pred []map[int32]struct{}, a, b int32) {
	for s := range succ[b] {
		delete(pred[s], b)
		if s != a {
			pred[s][a] = struct{}{}
			succ[a][s] = struct{}{}
		}
	}
	for s := range pred[b] {
		delete(succ[s], b)
		if s != a {
			succ[s][a] = struct{}{}
			pred[a][s] = struct{}{}
		}
	}
	delete(succ[a], b)
	delete(pred[a], b)
	succ[b], pred[b] = nil, nil
}

func intersect(a, b []int) []int {
	if slices.Equal(a, b) {
		return a
	}
	var out []int
	for _, x := range a {
		if slices.Contains(b, x) {
			out = append(out, x)
		}
	}
	return out
}

// groupGraph is the DAG of groups that the LP- and ILP-based placers
// solve: per-group costs, edges with the bytes crossing them, and a
// topological order.
type groupGraph struct {
	gs    *Groups
	order []int32 // topological order of groups
	edges []groupEdge
	out   [][]int32 // edge indices leaving each group
	in    [][]int32 // edge indices entering each group
}

type groupEdge struct {
	from, to int32
	bytes    int64
}

// newGroupGraph derives the edges between groups. Each tensor crossing
// into a group counts once toward that edge's bytes.
func newGroupGraph(p *Problem, gs *Groups) *groupGraph {
	g := p.Graph
	gg := &groupGraph{gs: gs, out: make([][]int32, gs.Len()), in: make([][]int32, gs.Len())}
	index := map[[2]int32]int32{}
	add := func(a, b int32, bytes int64) {
		k := [2]int32{a, b}
		e, ok := index[k]
		if !ok {
			e = int32(len(gg.edges))
			index[k] = e
			gg.edges = append(gg.edges, groupEdge{from: a, to: b})
			gg.out[a] = append(gg.out[a], e)
			gg.in[b] = append(gg.in[b], e)
		}
		gg.edges[e].bytes += bytes
	}
	for _, op := range p.Order {
		a := gs.Of[op]
		for _, out := range g.Ops[op].Outputs {
			var seen []int32
			for _, c := range g.Tensors[out].Consumers {
				b := gs.Of[c]
				if b != a && !slices.Contains(seen, b) {
					seen = append(seen, b)
					add(a, b, g.Tensors[out].Bytes())
				}
			}
		}
		for _, s := range p.Adj.Succs(op) {
			if b := gs.Of[s]; b != a {
				add(a, b, 0)
			}
		}
	}
	// A stable topological order: smallest group index first.
	next := make([][]int32, gs.Len())
	for _, e := range gg.edges {
		next[e.from] = append(next[e.from], e.to)
	}
	gg.order, _ = graph.TopoSort(gs.Len(), func(g int32) []int32 { return next[g] })
	return gg
}
