package partition

import (
	"slices"

	"github.com/opplace/opplace/graph"
)

// A reduction merges tiny units into a neighbour before "exact"
// enumerates downsets. ONNX exports hang many small side branches off
// the main path (Shape → Gather → Unsqueeze → Concat feeding a Reshape,
// masks, casts, weight transposes); each can join a downset independently
// of the main path, so the downsets multiply. A group X whose compute
// (forward + backward + update on its slowest class) is at most ε of the
// graph's is merged, in unit order until nothing changes:
//
//   - up into U when U is its only predecessor and U has another
//     successor (X branches off U; merging the next op of a chain would
//     coarsen the cuts without narrowing the graph);
//   - down into V when X has no predecessor and V is its only successor.
//
// Weightless sources (constants: no predecessor, no time, parameters or
// scratch) do not count as predecessors: any split can move one to the
// first stage, paying only its output bytes. A group may absorb at most
// ε of the compute, so merges strip side branches but never snowball
// along a chain of small ops (GNMT's unrolled cells) into one unit.
//
// Neither merge can close a cycle (U → X is X's only way in; X → V its
// only way out), and each is a legal move of any split: X's predecessors
// are all in U's stage, or X has none and its consumers are all in V's.
// So the optimum over the reduced graph is a split of the unit graph (an
// upper bound), and a relaxation gives a lower bound: the same reduced
// graph where the moved units (merged ones and weightless sources) cost
// no time, parameters, scratch or stash, and where an up-moved group's
// outputs weigh nothing unless they are no larger than the inputs that
// only it and U read (then moving it up never adds bytes to a boundary).
// Applying the merges in order to an optimal split of the unit graph
// never raises a stage's relaxed cost, so the relaxed optimum is at most
// the true one, provided that optimum has no stage made only of moved
// units (a stage of devices that are all but idle). "exact" solves both
// and reports the gap. The relaxation drops the moved ops' kernel
// launches, which the model charges every micro-batch, so the gap is an
// upper bound on the loss, usually far above it.
type reduction struct {
	eps    float64
	merged int     // merges done
	real   *units  // the reduced graph
	m      *model  // its costs
	relaxU *units  // the same graph with the relaxed tensor bytes
	relaxM *model  // and the relaxed costs
	group  []int32 // per unit of the unit graph, its reduced unit
}

type move struct {
	up      bool
	out, in []int32 // crossing tensors: X's outputs leaving X; inputs only X ∪ U read
}

// reduce merges the units of u whose compute is at most eps of the total
// (eps <= 0: none), returning nil when nothing merges.
func reduce(u *units, m *model, eps float64) *reduction {
	if eps <= 0 || u.n < 2 {
		return nil
	}
	nc := len(m.classes)
	cost := make([]float64, u.n)
	var total float64
	for v := 0; v < u.n; v++ {
		for k := 0; k < nc; k++ {
			if i := v*nc + k; m.banned[i] == 0 {
				cost[v] = max(cost[v], m.fwd[i]+m.bwd[i]+m.upd[i])
			}
		}
		total += cost[v]
	}
	limit := eps * total
	uf := graph.NewUnionFind[int32](u.n) // a group is named by its anchor
	members := make([][]int32, u.n)
	preds := make([][]int32, u.n)
	succs := make([][]int32, u.n)
	// One backing array each, every unit's window capped at its length,
	// so growing one copies it out and shrinking stays in its window.
	ne := 0
	for v := range u.n {
		ne += len(u.pred[v])
	}
	self, flatP, flatS := make([]int32, u.n), make([]int32, 0, ne), make([]int32, 0, ne)
	for v := range u.n {
		self[v] = int32(v)
		members[v] = self[v : v+1 : v+1]
		i := len(flatP)
		flatP = append(flatP, u.pred[v]...)
		preds[v] = flatP[i:len(flatP):len(flatP)]
		i = len(flatS)
		flatS = append(flatS, u.succ[v]...)
		succs[v] = flatS[i:len(flatS):len(flatS)]
	}
	// Weightless sources (constants: no predecessor, no time on any
	// class, no parameters or scratch) are ignored as predecessors: any
	// split can move one to the first stage at no cost but its output
	// bytes, which the relaxation zeroes.
	moved := make([]bool, u.n)
	weightless := make([]bool, u.n)
	for v := 0; v < u.n; v++ {
		weightless[v] = len(u.pred[v]) == 0 && cost[v] == 0 && m.params[v] == 0 && m.temp[v] == 0
		moved[v] = weightless[v]
	}
	real := func(list []int32) (n int, last int32) {
		for _, p := range list {
			if !weightless[p] {
				n, last = n+1, p
			}
		}
		return n, last
	}
	gcost := slices.Clone(cost)
	// attached is the cost a group holds of units merged into it. It
	// stays under the limit too, so merges strip side branches but do not
	// snowball along a chain of small ops into one giant unit.
	attached := make([]float64, u.n)
	var moves []move
	for changed := true; changed; {
		changed = false
		for x := int32(0); x < int32(u.n); x++ {
			if uf.Find(x) != x || gcost[x] > limit || weightless[x] {
				continue
			}
			var to int32
			var mv move
			np, p := real(preds[x])
			switch {
			case np == 1 && len(succs[p]) > 1:
				// Only a branch off p: merging the next op of a chain
				// would not narrow the graph, only coarsen its cuts.
				to, mv.up = p, true
				mv.out, mv.in = crossing(u, members[x], uf.Find, x, to)
			case np == 0 && len(succs[x]) == 1:
				to = succs[x][0]
			default:
				continue
			}
			if attached[to]+gcost[x] > limit {
				continue
			}
			moves = append(moves, mv)
			for _, v := range members[x] {
				moved[v] = true
			}
			for _, p := range preds[x] {
				succs[p] = drop(succs[p], x)
				if p != to {
					succs[p], preds[to] = add(succs[p], to), add(preds[to], p)
				}
			}
			for _, s := range succs[x] {
				preds[s] = drop(preds[s], x)
				if s != to {
					preds[s], succs[to] = add(preds[s], to), add(succs[to], s)
				}
			}
			preds[x], succs[x] = nil, nil
			uf.Link(x, to)
			members[to] = append(members[to], members[x]...)
			members[x] = nil
			gcost[to] += gcost[x]
			attached[to] += gcost[x]
			changed = true
		}
	}
	if len(moves) == 0 {
		return nil
	}
	// Relaxed tensor bytes: zero an up-moved group's outputs unless they
	// weigh no more than the inputs only it and its anchor read. Zeroing
	// can break an earlier check, so repeat until nothing changes.
	rb := make([]int64, len(u.tensors))
	for i, t := range u.tensors {
		if !weightless[t.producer] {
			rb[i] = t.bytes
		}
	}
	sum := func(ts []int32) (b int64) {
		for _, t := range ts {
			b += rb[t]
		}
		return b
	}
	for changed := true; changed; {
		changed = false
		for _, mv := range moves {
			if mv.up && sum(mv.out) > sum(mv.in) {
				for _, t := range mv.out {
					rb[t] = 0
				}
				changed = true
			}
		}
	}
	r := &reduction{eps: eps, merged: len(moves), group: make([]int32, u.n)}
	for v := int32(0); v < int32(u.n); v++ {
		if uf.Find(v) == v {
			slices.Sort(members[v])
		}
	}
	// Number the groups in a stable topological order (smallest anchor
	// first): the anchors' own order may not be one, since an anchor can
	// absorb a source group from before it. Merged units have no edges
	// left, so leaving them out of the order changes nothing.
	order, _ := graph.TopoSort(u.n, func(v int32) []int32 { return succs[v] })
	id := make([]int32, u.n)
	var topo []int32
	for _, a := range order {
		if uf.Find(a) == a {
			id[a] = int32(len(topo))
			topo = append(topo, a)
		}
	}
	for v := range r.group {
		r.group[v] = id[uf.Find(int32(v))]
	}
	r.real, r.relaxU = &units{n: len(topo), training: u.training}, &units{n: len(topo), training: u.training}
	ru := r.real
	ru.ops = make([][]graph.OpID, ru.n)
	ru.succ, ru.pred = make([][]int32, ru.n), make([][]int32, ru.n)
	ru.unitOf = make([]int32, len(u.unitOf))
	for k, a := range topo {
		for _, v := range members[a] {
			ru.ops[k] = append(ru.ops[k], u.ops[v]...)
		}
		for _, s := range succs[a] {
			ru.succ[k] = append(ru.succ[k], id[s])
		}
		for _, p := range preds[a] {
			ru.pred[k] = append(ru.pred[k], id[p])
		}
		slices.Sort(ru.succ[k])
		slices.Sort(ru.pred[k])
	}
	for op, v := range u.unitOf {
		ru.unitOf[op] = r.group[v]
	}
	*r.relaxU = *ru
	ru.outT, ru.inT = make([][]int32, ru.n), make([][]int32, ru.n)
	ru.tensors = make([]crossTensor, 0, len(u.tensors))
	r.relaxU.tensors = make([]crossTensor, 0, len(u.tensors))
	for ti, t := range u.tensors {
		p := r.group[t.producer]
		var cons []int32
		for _, c := range t.consumers {
			if g := r.group[c]; g != p && !slices.Contains(cons, g) {
				cons = append(cons, g)
			}
		}
		if len(cons) == 0 {
			continue
		}
		slices.Sort(cons)
		k := int32(len(ru.tensors))
		ru.tensors = append(ru.tensors, crossTensor{bytes: t.bytes, producer: p, consumers: cons})
		r.relaxU.tensors = append(r.relaxU.tensors, crossTensor{bytes: rb[ti], producer: p, consumers: cons})
		ru.outT[p] = append(ru.outT[p], k)
		for _, c := range cons {
			ru.inT[c] = append(ru.inT[c], k)
		}
	}
	r.relaxU.outT, r.relaxU.inT = ru.outT, ru.inT
	r.m = aggregate(m, ru.n, nc, r.group, nil)
	r.relaxM = aggregate(m, ru.n, nc, r.group, moved)
	return r
}

// crossing lists, for moving group x up into its only predecessor group
// to, the crossing tensors x's members send outside x, and those they
// read that only x and to read.
func crossing(u *units, xs []int32, find func(int32) int32, x, to int32) (out, in []int32) {
	for _, v := range xs {
		for _, t := range u.outT[v] {
			for _, c := range u.tensors[t].consumers {
				if find(c) != x {
					out = append(out, t)
					break
				}
			}
		}
		for _, t := range u.inT[v] {
			ct := &u.tensors[t]
			if find(ct.producer) != to || slices.Contains(in, t) {
				continue
			}
			only := true
			for _, c := range ct.consumers {
				if g := find(c); g != x && g != to {
					only = false
					break
				}
			}
			if only {
				in = append(in, t)
			}
		}
	}
	return out, in
}

// aggregate is m summed over the groups of group (the reduced graph's
// units), leaving out the units marked in skip.
func aggregate(m *model, n, nc int, group []int32, skip []bool) *model {
	r := *m
	r.fwd, r.bwd, r.upd = make([]float64, n*nc), make([]float64, n*nc), make([]float64, n*nc)
	r.fwdL, r.bwdL = make([]float64, n*nc), make([]float64, n*nc)
	r.banned = make([]int32, n*nc)
	na := len(m.apartRule)
	r.apart = make([]int32, n*na)
	r.params, r.stash, r.temp, r.grads = make([]int64, n), make([]int64, n), make([]int64, n), make([]int64, n)
	for v, g := range group {
		if skip != nil && skip[v] {
			continue
		}
		for k := 0; k < nc; k++ {
			i, j := int(g)*nc+k, v*nc+k
			r.fwd[i] += m.fwd[j]
			r.bwd[i] += m.bwd[j]
			r.upd[i] += m.upd[j]
			r.fwdL[i] += m.fwdL[j]
			r.bwdL[i] += m.bwdL[j]
			r.banned[i] += m.banned[j]
		}
		for x := 0; x < na; x++ {
			r.apart[int(g)*na+x] += m.apart[v*na+x]
		}
		r.params[g] += m.params[v]
		r.grads[g] += m.grads[v]
		r.stash[g] += m.stash[v]
		r.temp[g] = max(r.temp[g], m.temp[v])
	}
	return &r
}

// add inserts v into the sorted list unless present.
func add(list []int32, v int32) []int32 {
	if i, found := slices.BinarySearch(list, v); !found {
		return slices.Insert(list, i, v)
	}
	return list
}

// drop removes v from the sorted list.
func drop(list []int32, v int32) []int32 {
	if i, found := slices.BinarySearch(list, v); found {
		return slices.Delete(list, i, i+1)
	}
	return list
}
