package graph

import (
	"slices"
)

// Grouping partitions ops into groups with union-find: colocation
// constraints, fused ops, placement units. Group identity is the smallest
// op ID in the group, so groupings built from the same merges in any order
// agree.
type Grouping struct {
	parent []OpID
}

// NewGrouping returns n singleton groups.
func NewGrouping(n int) *Grouping {
	p := make([]OpID, n)
	for i := range p {
		p[i] = OpID(i)
	}
	return &Grouping{parent: p}
}

// Find returns the representative (smallest member) of op's group.
func (gr *Grouping) Find(op OpID) OpID {
	root := op
	for gr.parent[root] != root {
		root = gr.parent[root]
	}
	for gr.parent[op] != root { // path compression
		op, gr.parent[op] = gr.parent[op], root
	}
	return root
}

// Union merges the groups of a and b and reports whether they were apart.
func (gr *Grouping) Union(a, b OpID) bool {
	ra, rb := gr.Find(a), gr.Find(b)
	if ra == rb {
		return false
	}
	if rb < ra {
		ra, rb = rb, ra
	}
	gr.parent[rb] = ra
	return true
}

// Groups lists the groups, each sorted by op ID, ordered by their smallest
// member.
func (gr *Grouping) Groups() [][]OpID {
	index := make(map[OpID]int)
	var out [][]OpID
	for i := range gr.parent {
		r := gr.Find(OpID(i))
		k, ok := index[r]
		if !ok {
			k = len(out)
			index[r] = k
			out = append(out, nil)
		}
		out[k] = append(out[k], OpID(i))
	}
	return out
}

// ColocationGroups merges ops that share a non-empty Colocate key.
func ColocationGroups(g *Graph) *Grouping {
	gr := NewGrouping(len(g.Ops))
	first := map[string]OpID{}
	for i := range g.Ops {
		key := g.Ops[i].Colocate
		if key == "" {
			continue
		}
		if f, ok := first[key]; ok {
			gr.Union(f, OpID(i))
		} else {
			first[key] = OpID(i)
		}
	}
	return gr
}

func slicesSearch(s []OpID, v OpID) (int, bool) { return slices.BinarySearch(s, v) }
