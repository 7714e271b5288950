package graph

import (
	"fmt"
	"slices"
	"strings"

	"github.com/opplace/opplace/internal/minheap"
)

// Adjacency is the op-level edge structure of a graph in compressed form:
// data edges (producer to consumer, once per pair) and control edges.
type Adjacency struct {
	succStart, predStart []int32
	succ, pred           []OpID
}

// Succs returns the distinct direct successors of op, in ascending ID
// order. The slice must not be modified.
func (a *Adjacency) Succs(op OpID) []OpID { return a.succ[a.succStart[op]:a.succStart[op+1]] }

// Preds returns the distinct direct predecessors of op, in ascending ID
// order. The slice must not be modified.
func (a *Adjacency) Preds(op OpID) []OpID { return a.pred[a.predStart[op]:a.predStart[op+1]] }

// NumEdges is the number of distinct op-to-op edges.
func (a *Adjacency) NumEdges() int { return len(a.succ) }

// BuildAdjacency derives the op-level edges of g. It costs O(ops + edges)
// time and two passes over the tensors; callers keep the result while the
// graph does not change.
func (g *Graph) BuildAdjacency() *Adjacency {
	n := len(g.Ops)
	type edge struct{ from, to OpID }
	edges := make([]edge, 0, len(g.Tensors)+n)
	for i := range g.Tensors {
		t := &g.Tensors[i]
		if t.Producer == NoOp {
			continue
		}
		for _, c := range t.Consumers {
			if c != t.Producer {
				edges = append(edges, edge{t.Producer, c})
			}
		}
	}
	for i := range g.Ops {
		for _, d := range g.Ops[i].ControlDeps {
			if d != OpID(i) {
				edges = append(edges, edge{d, OpID(i)})
			}
		}
	}
	slices.SortFunc(edges, func(a, b edge) int {
		if a.from != b.from {
			return int(a.from - b.from)
		}
		return int(a.to - b.to)
	})
	edges = slices.Compact(edges)

	a := &Adjacency{
		succStart: make([]int32, n+1),
		predStart: make([]int32, n+1),
		succ:      make([]OpID, len(edges)),
		pred:      make([]OpID, len(edges)),
	}
	for _, e := range edges {
		a.succStart[e.from+1]++
		a.predStart[e.to+1]++
	}
	for i := 0; i < n; i++ {
		a.succStart[i+1] += a.succStart[i]
		a.predStart[i+1] += a.predStart[i]
	}
	succFill := slices.Clone(a.succStart[:n])
	predFill := slices.Clone(a.predStart[:n])
	// edges are sorted by (from, to), so both lists come out ascending.
	for _, e := range edges {
		a.succ[succFill[e.from]] = e.to
		succFill[e.from]++
		a.pred[predFill[e.to]] = e.from
		predFill[e.to]++
	}
	return a
}

// CycleError reports a cycle by the names of the ops on it.
type CycleError struct {
	Ops []string
}

func (e *CycleError) Error() string {
	ops := e.Ops
	path, count := strings.Join(ops, " -> "), ""
	if len(ops) > cycleShown+1 {
		// A cycle of 10^5 ops would be a line of megabytes: its first
		// ops, its last and the count say where to look.
		path = strings.Join(ops[:cycleShown], " -> ") + " -> ... -> " + ops[len(ops)-1]
		count = fmt.Sprintf(" (%d ops in the cycle)", len(ops))
	}
	return fmt.Sprintf("the graph has a cycle: %s -> %s%s; an operator graph must be acyclic (check the inputs of these nodes)",
		path, ops[0], count)
}

// cycleShown is how many of a long cycle's first ops its message names
// (and its last).
const cycleShown = 5

// TopoOrder returns the ops in a topological order that is stable: among
// ops whose predecessors are all done, the one with the smallest ID (the
// earliest added) comes first, so the same graph always gives the same
// order. A cycle is returned as a *CycleError naming its ops.
func (g *Graph) TopoOrder(adj *Adjacency) ([]OpID, error) {
	order, cycle := TopoSort(len(g.Ops), adj.Succs)
	if cycle == nil {
		return order, nil
	}
	names := make([]string, len(cycle))
	for i, id := range cycle {
		names[i] = g.Ops[id].Name
	}
	return nil, &CycleError{Ops: names}
}

// TopoSort orders the nodes 0..n-1 of a directed graph given by its
// successor lists (duplicates allowed) with Kahn's algorithm, taking the
// smallest ready node first, so the order is the lexicographically
// smallest topological one and the same graph always gives the same
// order. On a cycle, order holds the nodes that could be ordered and
// cycle the nodes of one cycle in edge order; cycle is nil on a DAG.
func TopoSort[T ~int32](n int, succ func(T) []T) (order, cycle []T) {
	indeg := make([]int32, n)
	for v := 0; v < n; v++ {
		for _, s := range succ(T(v)) {
			indeg[s]++
		}
	}
	ready := minheap.New(func(a, b T) bool { return a < b })
	for v := 0; v < n; v++ {
		if indeg[v] == 0 {
			ready.Push(T(v))
		}
	}
	order = make([]T, 0, n)
	for ready.Len() > 0 {
		v := ready.Pop()
		order = append(order, v)
		for _, s := range succ(v) {
			if indeg[s]--; indeg[s] == 0 {
				ready.Push(s)
			}
		}
	}
	if len(order) == n {
		return order, nil
	}
	return order, findCycle(n, succ, indeg)
}

// findCycle walks predecessors among the nodes Kahn's algorithm could not
// order (indeg > 0), from the smallest and taking the smallest such
// predecessor each step; every such node has one, so the walk must
// revisit a node, and the revisited stretch is a cycle.
func findCycle[T ~int32](n int, succ func(T) []T, indeg []int32) []T {
	pred := make([][]T, n)
	start := T(-1)
	for v := 0; v < n; v++ {
		if indeg[v] == 0 {
			continue
		}
		if start < 0 {
			start = T(v)
		}
		for _, s := range succ(T(v)) {
			if indeg[s] > 0 {
				pred[s] = append(pred[s], T(v)) // ascending in v
			}
		}
	}
	pos := map[T]int{}
	var path []T
	for v := start; ; v = pred[v][0] {
		if p, seen := pos[v]; seen {
			cyc := path[p:]
			slices.Reverse(cyc) // walked against the edges
			return cyc
		}
		pos[v] = len(path)
		path = append(path, v)
	}
}

// Depths returns each node's depth in the DAG given by its successor
// lists: the edges on a longest path from a source to it. Nodes on or
// behind a cycle get -1.
func Depths[T ~int32](n int, succ func(T) []T) []int32 {
	order, cycle := TopoSort(n, succ)
	depth := make([]int32, n)
	for _, v := range order {
		for _, s := range succ(v) {
			depth[s] = max(depth[s], depth[v]+1)
		}
	}
	if cycle != nil {
		ordered := make([]bool, n)
		for _, v := range order {
			ordered[v] = true
		}
		for v := range depth {
			if !ordered[v] {
				depth[v] = -1
			}
		}
	}
	return depth
}
