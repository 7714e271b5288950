package graph

import (
	"slices"
)

// UnionFind partitions the dense indices 0..n-1 (ops, units, groups,
// file nodes) into disjoint groups. Union keeps the smaller
// representative, so a group made by Union alone is named by its smallest
// member whatever the order of the merges; Link lets a caller choose the
// representative instead (to keep per-group data at the root with the
// larger adjacency, say). Find compresses paths.
type UnionFind[T ~int32] struct {
	parent []T
}

// NewUnionFind returns n singleton groups.
func NewUnionFind[T ~int32](n int) *UnionFind[T] {
	p := make([]T, n)
	for i := range p {
		p[i] = T(i)
	}
	return &UnionFind[T]{parent: p}
}

// Len is the number of elements (not groups).
func (u *UnionFind[T]) Len() int { return len(u.parent) }

// Find returns the representative of x's group.
func (u *UnionFind[T]) Find(x T) T {
	root := x
	for u.parent[root] != root {
		root = u.parent[root]
	}
	for u.parent[x] != root { // path compression
		x, u.parent[x] = u.parent[x], root
	}
	return root
}

// Union merges the groups of a and b, the smaller representative naming
// the result, and reports whether they were apart.
func (u *UnionFind[T]) Union(a, b T) bool {
	ra, rb := u.Find(a), u.Find(b)
	if ra == rb {
		return false
	}
	if rb < ra {
		ra, rb = rb, ra
	}
	u.parent[rb] = ra
	return true
}

// Link merges the group whose representative is child into the group
// whose representative is root, which names the result. Both must be
// representatives of different groups.
func (u *UnionFind[T]) Link(child, root T) {
	u.parent[child] = root
}

// Groups lists the groups, each ascending, ordered by their smallest
// member.
func (u *UnionFind[T]) Groups() [][]T {
	index := make([]int32, len(u.parent)) // by representative, 1-based
	var out [][]T
	for i := range u.parent {
		r := u.Find(T(i))
		if index[r] == 0 {
			out = append(out, nil)
			index[r] = int32(len(out))
		}
		k := index[r] - 1
		out[k] = append(out[k], T(i))
	}
	return out
}

// Grouping partitions ops into groups: colocation constraints, fused ops,
// placement units. Built with Union only, group identity is the smallest
// op ID in the group, so groupings built from the same merges in any
// order agree.
type Grouping = UnionFind[OpID]

// NewGrouping returns n singleton groups of ops.
func NewGrouping(n int) *Grouping { return NewUnionFind[OpID](n) }

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
