package graph_test

import (
	"reflect"
	"testing"

	"github.com/opplace/opplace/graph"
)

func TestUnionFind(t *testing.T) {
	type step struct {
		link bool // Link(a, b) instead of Union(a, b)
		a, b int32
	}
	for _, tc := range []struct {
		name   string
		n      int
		steps  []step
		roots  []int32 // Find of each element afterwards
		groups [][]int32
	}{
		{name: "singletons", n: 3, roots: []int32{0, 1, 2}, groups: [][]int32{{0}, {1}, {2}}},
		{name: "union keeps the smallest", n: 5,
			steps: []step{{a: 4, b: 2}, {a: 2, b: 3}, {a: 3, b: 1}},
			roots: []int32{0, 1, 1, 1, 1}, groups: [][]int32{{0}, {1, 2, 3, 4}}},
		{name: "link keeps the chosen root", n: 4,
			steps: []step{{link: true, a: 0, b: 3}, {link: true, a: 1, b: 3}},
			roots: []int32{3, 3, 2, 3}, groups: [][]int32{{0, 1, 3}, {2}}},
		{name: "groups ordered by smallest member", n: 6,
			steps: []step{{a: 5, b: 1}, {link: true, a: 0, b: 4}, {a: 2, b: 3}},
			roots: []int32{4, 1, 2, 2, 4, 1}, groups: [][]int32{{0, 4}, {1, 5}, {2, 3}}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			u := graph.NewUnionFind[int32](tc.n)
			for _, s := range tc.steps {
				if s.link {
					u.Link(u.Find(s.a), u.Find(s.b))
				} else if !u.Union(s.a, s.b) {
					t.Fatalf("Union(%d, %d) found them together", s.a, s.b)
				}
			}
			roots := make([]int32, tc.n)
			for i := range roots {
				roots[i] = u.Find(int32(i))
			}
			if !reflect.DeepEqual(roots, tc.roots) {
				t.Errorf("roots %v, want %v", roots, tc.roots)
			}
			if got := u.Groups(); !reflect.DeepEqual(got, tc.groups) {
				t.Errorf("groups %v, want %v", got, tc.groups)
			}
			if u.Len() != tc.n {
				t.Errorf("Len %d, want %d", u.Len(), tc.n)
			}
		})
	}
}

func TestTopoSort(t *testing.T) {
	for _, tc := range []struct {
		name  string
		succ  [][]int32
		order []int32
		cycle []int32
		depth []int32
	}{
		{name: "empty", succ: nil, order: []int32{}, depth: []int32{}},
		{name: "smallest ready first", succ: [][]int32{{3}, {}, {0}, {}},
			order: []int32{1, 2, 0, 3}, depth: []int32{1, 0, 0, 2}},
		{name: "duplicate edges", succ: [][]int32{{1, 1}, {}},
			order: []int32{0, 1}, depth: []int32{0, 1}},
		{name: "longest path sets the depth", succ: [][]int32{{1, 3}, {2}, {3}, {}},
			order: []int32{0, 1, 2, 3}, depth: []int32{0, 1, 2, 3}},
		{name: "two-cycle", succ: [][]int32{{1}, {0}},
			order: []int32{}, cycle: []int32{1, 0}, depth: []int32{-1, -1}},
		{name: "cycle behind a source and before a sink", succ: [][]int32{{2}, {4}, {3}, {2, 1}, {}, {}},
			order: []int32{0, 5}, cycle: []int32{2, 3}, depth: []int32{0, -1, -1, -1, -1, 0}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			succ := func(v int32) []int32 { return tc.succ[v] }
			order, cycle := graph.TopoSort(len(tc.succ), succ)
			if !reflect.DeepEqual(order, tc.order) || !reflect.DeepEqual(cycle, tc.cycle) {
				t.Errorf("TopoSort = %v, cycle %v; want %v, cycle %v", order, cycle, tc.order, tc.cycle)
			}
			if got := graph.Depths(len(tc.succ), succ); !reflect.DeepEqual(got, tc.depth) {
				t.Errorf("Depths = %v, want %v", got, tc.depth)
			}
		})
	}
}
