package partition

import (
	"slices"

	"github.com/opplace/opplace/graph"
)

// units is the graph contracted to placement units, numbered in a stable
// topological order of the forward DAG between them.
//
// A unit is a colocation group holding a forward op. Backward and update
// ops are folded into the unit of their colocation group; a group with no
// forward op joins, whole, one unit: that of the first of its ops in
// topological order to find one, through the first forward op reading
// the same parameter, else its latest-ordered data predecessor; failing
// both for every op, that of its last op's earliest successor. Edges
// between units come from forward ops only:
// gradients flow backward by construction, so they would make every
// forward edge a cycle. Units that still form a cycle (two forward ops of
// one colocation group far apart) are merged.
type units struct {
	n        int
	ops      [][]graph.OpID // per unit, ascending
	unitOf   []int32        // per op
	succ     [][]int32
	pred     [][]int32
	training bool
	// crossing tensors: activations of forward ops read by another unit.
	tensors []crossTensor
	outT    [][]int32 // per unit: indices into tensors it produces
	inT     [][]int32 // per unit: indices into tensors it consumes
}

type crossTensor struct {
	bytes    int64
	producer int32
	// consumers are the distinct other units reading the tensor.
	consumers []int32
}

func buildUnits(g *graph.Graph, free func(graph.OpID) bool, modules []string) (*units, error) {
	adj := g.BuildAdjacency()
	order, err := g.TopoOrder(adj)
	if err != nil {
		return nil, err
	}
	n := len(g.Ops)
	gr := graph.ColocationGroups(g)
	training := false
	// Provisional unit per op: the group's root when the group holds a
	// forward op.
	rootUnit := make([]int32, n) // by group root, -1 = none yet
	for i := range rootUnit {
		rootUnit[i] = -1
	}
	unitOf := make([]int32, n)
	for i := range unitOf {
		unitOf[i] = -1
	}
	for i := range g.Ops {
		if g.Ops[i].Phase == graph.Forward {
			rootUnit[gr.Find(graph.OpID(i))] = int32(gr.Find(graph.OpID(i)))
		} else if g.Ops[i].Phase == graph.Backward {
			training = true
		}
	}
	// Parameter tensor -> first forward op reading it.
	paramUser := map[graph.TensorID]graph.OpID{}
	for _, op := range order {
		if g.Ops[op].Phase != graph.Forward {
			continue
		}
		for _, t := range g.Ops[op].Inputs {
			if g.Tensors[t].Kind == graph.Parameter {
				if _, ok := paramUser[t]; !ok {
					paramUser[t] = op
				}
			}
		}
	}
	pos := make([]int32, n)
	for i, op := range order {
		pos[op] = int32(i)
	}
	assign := func(op graph.OpID) int32 {
		if u := rootUnit[gr.Find(op)]; u >= 0 {
			return u
		}
		for _, t := range g.Ops[op].Inputs {
			if f, ok := paramUser[t]; ok {
				return unitOf[f]
			}
		}
		best, bestPos := int32(-1), int32(-1)
		for _, p := range adj.Preds(op) {
			if unitOf[p] >= 0 && pos[p] > bestPos {
				best, bestPos = unitOf[p], pos[p]
			}
		}
		return best
	}
	for _, op := range order {
		if unitOf[op] < 0 {
			if u := assign(op); u >= 0 {
				unitOf[op] = u
				rootUnit[gr.Find(op)] = u
			}
		}
	}
	for i := len(order) - 1; i >= 0; i-- {
		op := order[i]
		if unitOf[op] >= 0 {
			continue
		}
		// A later op of the group may have found the group's unit.
		if u := rootUnit[gr.Find(op)]; u >= 0 {
			unitOf[op] = u
			continue
		}
		best, bestPos := int32(-1), int32(n)
		for _, s := range adj.Succs(op) {
			if unitOf[s] >= 0 && pos[s] < bestPos {
				best, bestPos = unitOf[s], pos[s]
			}
		}
		if best < 0 {
			best = unitOf[order[0]]
			if best < 0 {
				best = int32(order[0]) // a graph with no forward op at all
			}
		}
		unitOf[op] = best
		rootUnit[gr.Find(op)] = best
	}
	// Merge units that a colocation key ties across forward edges into a
	// cycle: union the strongly connected components of the unit graph.
	uf := graph.NewGrouping(n)
	for i := range unitOf {
		uf.Union(graph.OpID(i), graph.OpID(unitOf[i]))
	}
	// Module-aligned cuts: the forward ops of one module form one unit.
	if modules != nil {
		first := map[string]graph.OpID{}
		for i, k := range modules {
			if k == "" || g.Ops[i].Phase != graph.Forward {
				continue
			}
			if f, ok := first[k]; ok {
				uf.Union(f, graph.OpID(i))
			} else {
				first[k] = graph.OpID(i)
			}
		}
	}
	for {
		edges := forwardEdges(g, adj, uf)
		merged := mergeCycles(n, edges, uf)
		if !merged {
			break
		}
	}
	contractFree(g, adj, uf, free)
	// Number the units in a stable topological order of their DAG:
	// smallest root first. Only roots have edges, so the other ops, left
	// out of the numbering, change nothing.
	edges := forwardEdges(g, adj, uf)
	succ := make([][]int32, n)
	for _, e := range edges {
		succ[e[0]] = append(succ[e[0]], e[1])
	}
	sorted, _ := graph.TopoSort(n, func(r int32) []int32 { return succ[r] })
	id := make([]int32, n) // by root
	var topo []int32
	for _, r := range sorted {
		if uf.Find(graph.OpID(r)) == graph.OpID(r) {
			id[r] = int32(len(topo))
			topo = append(topo, r)
		}
	}
	u := &units{n: len(topo), training: training, unitOf: make([]int32, n)}
	u.ops = make([][]graph.OpID, u.n)
	for i := 0; i < n; i++ {
		k := id[uf.Find(graph.OpID(i))]
		u.unitOf[i] = k
		u.ops[k] = append(u.ops[k], graph.OpID(i))
	}
	u.succ = make([][]int32, u.n)
	u.pred = make([][]int32, u.n)
	for _, e := range edges {
		a, b := id[e[0]], id[e[1]]
		u.succ[a] = append(u.succ[a], b)
		u.pred[b] = append(u.pred[b], a)
	}
	for i := range u.succ {
		slices.Sort(u.succ[i])
		slices.Sort(u.pred[i])
	}
	u.buildCrossing(g)
	return u, nil
}

// contractFree merges each free unit (every op costs no time and holds no
// parameter: Shape, Constant, Reshape chains) into its only successor, or
// else its only predecessor, until none is left that can merge. ONNX
// exports hang many such side chains off the main path; each would
// multiply the downsets "exact" enumerates, and a cut between a free unit
// and its sole neighbour balances no compute (it can only change which
// of two tensors crosses), so the partitioners search the contracted
// graph and "exact" is exact over it. A unit with a single successor cannot close a
// cycle by merging into it, nor one with a single predecessor.
func contractFree(g *graph.Graph, adj *graph.Adjacency, uf *graph.Grouping, free func(graph.OpID) bool) {
	n := len(g.Ops)
	freeRoot := make([]bool, n)
	for i := range freeRoot {
		freeRoot[i] = true
	}
	for i := 0; i < n; i++ {
		if !free(graph.OpID(i)) {
			freeRoot[uf.Find(graph.OpID(i))] = false
		}
	}
	for changed := true; changed; {
		changed = false
		edges := forwardEdges(g, adj, uf)
		succ := make(map[int32][]int32)
		pred := make(map[int32][]int32)
		for _, e := range edges {
			succ[e[0]] = append(succ[e[0]], e[1])
			pred[e[1]] = append(pred[e[1]], e[0])
		}
		merged := make([]bool, n)
		for i := 0; i < n; i++ {
			r := int32(uf.Find(graph.OpID(i)))
			if int32(i) != r || !freeRoot[r] || merged[r] {
				continue
			}
			var to int32 = -1
			if len(succ[r]) == 1 {
				to = succ[r][0]
			} else if len(pred[r]) == 1 {
				to = pred[r][0]
			}
			if to < 0 || merged[to] {
				continue
			}
			// Merge one pair per unit per pass: the edge lists above go
			// stale once a unit absorbs another.
			merged[r], merged[to] = true, true
			f := freeRoot[to]
			uf.Union(graph.OpID(r), graph.OpID(to))
			freeRoot[uf.Find(graph.OpID(r))] = f
			changed = true
		}
	}
}

// forwardEdges lists the distinct edges between different groups of uf
// carried by forward ops (data or control), sorted.
func forwardEdges(g *graph.Graph, adj *graph.Adjacency, uf *graph.Grouping) [][2]int32 {
	var edges [][2]int32
	for i := range g.Ops {
		if g.Ops[i].Phase != graph.Forward {
			continue
		}
		a := int32(uf.Find(graph.OpID(i)))
		for _, s := range adj.Succs(graph.OpID(i)) {
			if g.Ops[s].Phase != graph.Forward {
				continue
			}
			if b := int32(uf.Find(s)); a != b {
				edges = append(edges, [2]int32{a, b})
			}
		}
	}
	slices.SortFunc(edges, func(x, y [2]int32) int {
		if x[0] != y[0] {
			return int(x[0] - y[0])
		}
		return int(x[1] - y[1])
	})
	return slices.Compact(edges)
}

// mergeCycles unions every strongly connected component of the group
// graph (Tarjan's algorithm) and reports whether it merged anything.
func mergeCycles(n int, edges [][2]int32, uf *graph.Grouping) bool {
	adj := make([][]int32, n)
	for _, e := range edges {
		adj[e[0]] = append(adj[e[0]], e[1])
	}
	index := make([]int32, n)
	low := make([]int32, n)
	on := make([]bool, n)
	for i := range index {
		index[i] = -1
	}
	var stack []int32
	next := int32(0)
	merged := false
	var visit func(v int32)
	visit = func(v int32) {
		index[v], low[v] = next, next
		next++
		stack = append(stack, v)
		on[v] = true
		for _, w := range adj[v] {
			if index[w] < 0 {
				visit(w)
				low[v] = min(low[v], low[w])
			} else if on[w] {
				low[v] = min(low[v], index[w])
			}
		}
		if low[v] == index[v] {
			for {
				w := stack[len(stack)-1]
				stack = stack[:len(stack)-1]
				on[w] = false
				if w == v {
					break
				}
				uf.Union(graph.OpID(v), graph.OpID(w))
				merged = true
			}
		}
	}
	for _, e := range edges {
		if index[e[0]] < 0 {
			visit(e[0])
		}
	}
	return merged
}

// buildCrossing records each forward activation read by another unit.
func (u *units) buildCrossing(g *graph.Graph) {
	u.outT = make([][]int32, u.n)
	u.inT = make([][]int32, u.n)
	for ti := range g.Tensors {
		t := &g.Tensors[ti]
		if t.Producer == graph.NoOp || g.Ops[t.Producer].Phase != graph.Forward {
			continue
		}
		p := u.unitOf[t.Producer]
		var cons []int32
		for _, c := range t.Consumers {
			if cu := u.unitOf[c]; cu != p && !slices.Contains(cons, cu) {
				cons = append(cons, cu)
			}
		}
		if len(cons) == 0 || t.Bytes() == 0 {
			continue
		}
		slices.Sort(cons)
		k := int32(len(u.tensors))
		u.tensors = append(u.tensors, crossTensor{bytes: t.Bytes(), producer: p, consumers: cons})
		u.outT[p] = append(u.outT[p], k)
		for _, c := range cons {
			u.inT[c] = append(u.inT[c], k)
		}
	}
}
