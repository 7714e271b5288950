package placer

import (
	"container/heap"
	"math"
	"slices"

	"github.com/opplace/opplace/graph"
)

// stepUnits chooses the ilp's units with the training step in mind. The
// forward ops are merged along their edges, the smallest pair first (a
// pair's size is its share of the step's work plus its share of the
// step's memory, its gradient and update ops included), into at most
// about target/2 units, so units are sized by compute and memory, not by
// count, and parallel branches stay apart until they are the smallest
// pieces left. Every backward and update op then joins the mirror unit
// of its forward op (the forward op of its colocation class, which
// train.Build gives every gradient and update): a layer's forward unit
// and its mirror run on one device, and the mirror units form the
// forward units' graph reversed, so the units stay acyclic where
// coarsening a topological order of the whole step would interleave
// forward and backward runs and let colocation tie them all to one
// device.
//
// With a start (a placement to begin from, or nil), no unit holds
// forward ops the start puts on different devices, so the start is one
// of the MILP's solutions exactly rather than a rounding of it, unless
// that leaves more than twice the target: merging then goes on across
// the start's devices.
//
// A graph with no backward ops gets forward units only (up to target).
// stepUnits returns nil when some backward or update op has no forward
// op in its class, or the units would not be acyclic: the caller then
// coarsens as before.
func stepUnits(p *Problem, lim *limits, target int, start []int) *Groups {
	g, n := p.Graph, len(p.Graph.Ops)
	// partner[op] is the forward op whose unit op joins: itself for a
	// forward op, the first forward op of its class (in p.Order) else.
	firstFwd := map[int32]graph.OpID{}
	for _, op := range p.Order {
		if g.Ops[op].Phase == graph.Forward {
			if _, ok := firstFwd[lim.class[op]]; !ok {
				firstFwd[lim.class[op]] = op
			}
		}
	}
	if len(firstFwd) == 0 {
		return nil
	}
	partner := make([]graph.OpID, n)
	training := false
	for i := range g.Ops {
		op := graph.OpID(i)
		if g.Ops[i].Phase == graph.Forward {
			partner[i] = op
			continue
		}
		f, ok := firstFwd[lim.class[op]]
		if !ok {
			return nil
		}
		partner[i], training = f, true
	}
	if training {
		target = max(target/2, 1)
	}
	q := newStepQuotient(p, lim, partner, start)
	// Ops of one class must share a device anyway: merge them first where
	// that keeps the forward graph acyclic; the rest stay constraints.
	for _, op := range p.Order {
		if g.Ops[op].Phase == graph.Forward {
			if first := firstFwd[lim.class[op]]; first != op {
				q.mergeIfSafe(int32(first), int32(op), math.Inf(1))
			}
		}
	}
	// Chains cost nothing in parallelism.
	for _, op := range p.Order {
		if g.Ops[op].Phase != graph.Forward {
			continue
		}
		a := q.uf.Find(int32(op))
		if len(q.succ[a]) == 1 {
			for b := range q.succ[a] {
				if len(q.pred[b]) == 1 {
					q.mergeIfSafe(a, b, math.Inf(1))
				}
			}
		}
	}
	q.mergeSmallest(target)
	if start != nil && q.roots > 2*target {
		// The start splits the forward graph far finer than target
		// units allow (a list scheduler's placement may switch devices
		// every few ops): merge on across its devices, and let the start
		// be rounded onto the units, rather than give Cbc a model it
		// cannot solve within its limit.
		q.dropStart()
		q.mergeSmallest(target)
	}
	// Number forward units by their smallest op, then the gradients'
	// mirror units, then the updates' (numbered by their forward unit).
	out := &Groups{Of: make([]int32, n)}
	tiers := [3]map[int32]int32{{}, {}, {}}
	add := func(tier int, key int32, op int) int32 {
		u, ok := tiers[tier][key]
		if !ok {
			u = int32(len(out.Members))
			tiers[tier][key] = u
			out.Members = append(out.Members, nil)
		}
		out.Of[op] = u
		out.Members[u] = append(out.Members[u], graph.OpID(op))
		return u
	}
	for _, tier := range []graph.Phase{graph.Forward, graph.Backward, graph.Update} {
		for i := range g.Ops {
			if g.Ops[i].Phase != tier {
				continue
			}
			f := q.uf.Find(int32(partner[i]))
			if tier == graph.Forward {
				add(0, f, i)
			} else {
				add(int(tier), tiers[0][f], i)
			}
		}
	}
	// Updates are sinks: a unit of them closes no cycle. Each joins its
	// mirror where that closes none either (the mirror reaches none of
	// the units whose gradients the updates read).
	mirrorOf := map[int32]int32{}
	for f, u := range tiers[2] {
		if m, ok := tiers[1][f]; ok {
			mirrorOf[u] = m
		}
	}
	return acyclicUnits(p, foldUpdates(p, out, mirrorOf))
}

// unitSuccs lists each unit's successors, ascending.
func unitSuccs(p *Problem, gs *Groups) [][]int32 {
	next := make([][]int32, len(gs.Members))
	for i := range p.Graph.Ops {
		a := gs.Of[i]
		for _, s := range p.Adj.Succs(graph.OpID(i)) {
			if b := gs.Of[s]; b != a && !slices.Contains(next[a], b) {
				next[a] = append(next[a], b)
			}
		}
	}
	for _, s := range next {
		slices.Sort(s)
	}
	return next
}

// foldUpdates merges each update unit u into its mirror mirrorOf[u]
// where no cycle results, in unit order, and renumbers.
func foldUpdates(p *Problem, gs *Groups, mirrorOf map[int32]int32) *Groups {
	n := len(gs.Members)
	into := make([]int32, n)
	for u := range into {
		into[u] = int32(u)
	}
	next := unitSuccs(p, gs)
	for u := int32(0); u < int32(n); u++ {
		m, ok := mirrorOf[u]
		if !ok {
			continue
		}
		// The units feeding u, as merged so far.
		var feeds []int32
		for a := range next {
			if slices.Contains(next[a], u) && int32(a) != m {
				feeds = append(feeds, int32(a))
			}
		}
		if reachesAny(next, m, feeds) {
			continue
		}
		into[u] = m
		for _, a := range feeds {
			if !slices.Contains(next[a], m) {
				next[a] = append(next[a], m)
			}
		}
	}
	uf := graph.NewUnionFind[int32](n)
	for u, m := range into {
		uf.Union(int32(u), m)
	}
	return mergeUnits(gs, uf)
}

// reachesAny reports whether some unit of targets can be reached from
// from along next.
func reachesAny(next [][]int32, from int32, targets []int32) bool {
	if len(targets) == 0 {
		return false
	}
	seen := make([]bool, len(next))
	stack := []int32{from}
	seen[from] = true
	for len(stack) > 0 {
		v := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		for _, s := range next[v] {
			if slices.Contains(targets, s) {
				return true
			}
			if !seen[s] {
				seen[s] = true
				stack = append(stack, s)
			}
		}
	}
	return false
}

// mergeUnits merges gs's units as uf groups them, numbered in the order
// of their first unit.
func mergeUnits(gs *Groups, uf *graph.UnionFind[int32]) *Groups {
	out := &Groups{Of: make([]int32, len(gs.Of))}
	index := map[int32]int32{}
	for u := range gs.Members {
		r := uf.Find(int32(u))
		k, ok := index[r]
		if !ok {
			k = int32(len(out.Members))
			index[r] = k
			out.Members = append(out.Members, nil)
		}
		out.Members[k] = append(out.Members[k], gs.Members[u]...)
	}
	for k, m := range out.Members {
		slices.Sort(m)
		for _, op := range m {
			out.Of[op] = int32(k)
		}
	}
	return out
}

// acyclicUnits merges the units on a cycle until there is none. A fused
// gradient op joins the mirror of its first member's forward op, while
// its other members' gradients would belong to other mirrors, and tied
// weights read in two places (GPT-2's embedding and output layer) update
// beside one of them: the mirrors then need not follow the forward units
// reversed, and a cycle's units must run as one.
func acyclicUnits(p *Problem, gs *Groups) *Groups {
	for {
		next := unitSuccs(p, gs)
		_, cycle := graph.TopoSort(len(next), func(u int32) []int32 { return next[u] })
		if cycle == nil {
			return gs
		}
		uf := graph.NewUnionFind[int32](len(next))
		for _, u := range cycle[1:] {
			uf.Union(cycle[0], u)
		}
		gs = mergeUnits(gs, uf)
	}
}

// stepQuotient is the graph of forward units under merging. Each forward
// op carries its mirrored ops' work and memory.
type stepQuotient struct {
	uf         *graph.UnionFind[int32]
	succ, pred []map[int32]struct{} // per root, forward edges only
	allowed    [][]int
	key        []int32 // ops with different keys never merge
	work       []float64
	mem        []int64
	totalWork  float64
	totalMem   float64
	memCap     int64
	roots      int
	// seen is the search's scratch (reachability), cleared per search.
	seen  []bool
	stack []int32
}

func newStepQuotient(p *Problem, lim *limits, partner []graph.OpID, start []int) *stepQuotient {
	g, t, n := p.Graph, p.Costs, len(p.Graph.Ops)
	q := &stepQuotient{uf: graph.NewUnionFind[int32](n), succ: make([]map[int32]struct{}, n), pred: make([]map[int32]struct{}, n),
		allowed: make([][]int, n), key: make([]int32, n), work: make([]float64, n), mem: make([]int64, n),
		memCap: groupMemCap(p), seen: make([]bool, n)}
	members := make([][]graph.OpID, n)
	for i := range g.Ops {
		members[partner[i]] = append(members[partner[i]], graph.OpID(i))
	}
	for i := range g.Ops {
		op := graph.OpID(i)
		if g.Ops[i].Phase != graph.Forward {
			continue
		}
		q.roots++
		q.allowed[i] = lim.devices(op)
		q.key[i] = lim.apartKey(op)
		if start != nil {
			// Separate rules' keys are small: the start's device keeps
			// its own range.
			q.key[i] += int32(1+start[i]) << 16
		}
		q.succ[i], q.pred[i] = map[int32]struct{}{}, map[int32]struct{}{}
		for _, m := range members[i] {
			q.work[i] += t.FastestTime(m)
			q.allowed[i] = intersect(q.allowed[i], lim.devices(m))
		}
		fp := t.Footprint(members[i])
		q.mem[i] = fp.Resident + fp.Stash
		q.totalWork += q.work[i]
		q.totalMem += float64(q.mem[i])
	}
	for i := range g.Ops {
		if g.Ops[i].Phase != graph.Forward {
			continue
		}
		for _, s := range p.Adj.Succs(graph.OpID(i)) {
			if g.Ops[s].Phase == graph.Forward {
				q.succ[i][int32(s)] = struct{}{}
				q.pred[s][int32(i)] = struct{}{}
			}
		}
	}
	return q
}

// dropStart forgets the start's devices in the keys, keeping the
// separate rules' part.
func (q *stepQuotient) dropStart() {
	for i := range q.key {
		q.key[i] &= 1<<16 - 1
	}
}

// size is a root's share of the step's work plus its share of memory.
func (q *stepQuotient) size(r int32) float64 {
	s := 0.0
	if q.totalWork > 0 {
		s += q.work[r] / q.totalWork
	}
	if q.totalMem > 0 {
		s += float64(q.mem[r]) / q.totalMem
	}
	return s
}

// mergeIfSafe merges the units of a and b when they allow a device in
// common, are bound alike by separate rules, stay within memCap and
// maxSize, and merging keeps the graph acyclic.
func (q *stepQuotient) mergeIfSafe(a, b int32, maxSize float64) bool {
	a, b = q.uf.Find(a), q.uf.Find(b)
	if a == b {
		return false
	}
	both := intersect(q.allowed[a], q.allowed[b])
	if len(both) == 0 || q.key[a] != q.key[b] || q.mem[a]+q.mem[b] > q.memCap {
		return false
	}
	if q.size(a)+q.size(b) > maxSize {
		return false
	}
	// The graph is acyclic: along an edge a->b there is no path back
	// from b to a, and none other from a to b when the edge is a's only
	// way out or b's only way in (Baechi's rule).
	_, ab := q.succ[a][b]
	_, ba := q.succ[b][a]
	switch {
	case ab:
		if len(q.succ[a]) > 1 && len(q.pred[b]) > 1 && q.pathAvoidingEdge(a, b) {
			return false
		}
	case ba:
		if len(q.succ[b]) > 1 && len(q.pred[a]) > 1 && q.pathAvoidingEdge(b, a) {
			return false
		}
	case q.pathAvoidingEdge(a, b) || q.pathAvoidingEdge(b, a):
		return false
	}
	// The root keeps the larger adjacency.
	if len(q.succ[a])+len(q.pred[a]) < len(q.succ[b])+len(q.pred[b]) {
		a, b = b, a
	}
	q.uf.Link(b, a)
	q.allowed[a] = both
	q.work[a] += q.work[b]
	q.mem[a] += q.mem[b]
	contract(q.succ, q.pred, a, b)
	q.allowed[b] = nil
	q.roots--
	return true
}

// pathAvoidingEdge reports whether some path leads from root a to root b
// other than a direct edge: merging them would then make a cycle. The
// search is complete (no budget), so the answer never depends on map
// order.
func (q *stepQuotient) pathAvoidingEdge(a, b int32) bool {
	stack := q.stack[:0]
	var visited []int32
	for s := range q.succ[a] {
		if s != b && !q.seen[s] {
			q.seen[s] = true
			visited = append(visited, s)
			stack = append(stack, s)
		}
	}
	found := false
	for len(stack) > 0 && !found {
		v := stack[len(stack)-1]
		stack = stack[:len(stack)-1]
		for s := range q.succ[v] {
			if s == b {
				found = true
				break
			}
			if !q.seen[s] {
				q.seen[s] = true
				visited = append(visited, s)
				stack = append(stack, s)
			}
		}
	}
	for _, v := range visited {
		q.seen[v] = false
	}
	q.stack = stack
	return found
}

// mergeSmallest merges the pair of neighbouring units with the smallest
// combined size, again and again, until at most target units remain or
// no pair may merge. No unit grows past twice the average size target
// units would have.
func (q *stepQuotient) mergeSmallest(target int) {
	if q.roots <= target {
		return
	}
	maxSize := 2 * (q.size0() / float64(target))
	h := &pairHeap{}
	push := func(a, b int32) {
		heap.Push(h, pair{size: q.size(a) + q.size(b), a: min(a, b), b: max(a, b)})
	}
	for r := range q.succ {
		if q.succ[r] == nil || q.uf.Find(int32(r)) != int32(r) {
			continue
		}
		for s := range q.succ[r] {
			push(int32(r), s)
		}
	}
	for h.Len() > 0 && q.roots > target {
		e := heap.Pop(h).(pair)
		a, b := q.uf.Find(e.a), q.uf.Find(e.b)
		if a == b {
			continue
		}
		if s := q.size(a) + q.size(b); s > e.size {
			push(a, b) // grew since pushed: retry at its size
			continue
		}
		if !q.mergeIfSafe(a, b, maxSize) {
			continue
		}
		r := q.uf.Find(a)
		for s := range q.succ[r] {
			push(r, s)
		}
		for s := range q.pred[r] {
			push(s, r)
		}
	}
}

// size0 is the sum of every unit's size (2 when the step has work and
// memory).
func (q *stepQuotient) size0() float64 {
	s := 0.0
	if q.totalWork > 0 {
		s++
	}
	if q.totalMem > 0 {
		s++
	}
	return max(s, 1)
}

type pair struct {
	size float64
	a, b int32
}

// pairHeap orders candidate merges by size, then by their roots, so the
// order never depends on the order they were pushed in.
type pairHeap []pair

func (h pairHeap) Len() int { return len(h) }
func (h pairHeap) Less(i, j int) bool {
	if h[i].size != h[j].size {
		return h[i].size < h[j].size
	}
	if h[i].a != h[j].a {
		return h[i].a < h[j].a
	}
	return h[i].b < h[j].b
}
func (h pairHeap) Swap(i, j int) { h[i], h[j] = h[j], h[i] }
func (h *pairHeap) Push(x any)   { *h = append(*h, x.(pair)) }
func (h *pairHeap) Pop() any {
	old := *h
	x := old[len(old)-1]
	*h = old[:len(old)-1]
	return x
}
