package graph_test

import (
	"fmt"
	"slices"
	"testing"

	"github.com/opplace/opplace/graph"
	"github.com/opplace/opplace/graph/graphtest"
)

// TestFuseOnDeviceSets: fusion never joins ops that no one device type
// runs together, since no device could run the fused kernel; ops sharing
// a type still fuse, and the group keeps the types all its members run on.
func TestFuseOnDeviceSets(t *testing.T) {
	// conv -> bn -> relu -> add, each op's device types as a bitset.
	build := func() *graph.Graph {
		b := graphtest.New("chain").Input("x", 100).Param("w", 10).Param("s", 4)
		typed(b, "conv", "Conv", 1000, 100, "x", "w")
		typed(b, "bn", "BatchNormalization", 10, 100, "conv", "s")
		typed(b, "relu", "Relu", 10, 100, "bn")
		typed(b, "add", "Add", 10, 100, "relu", "relu")
		return b.Output("add").G
	}
	tests := []struct {
		name string
		runs []uint64 // conv, bn, relu, add
		want string
	}{
		{"unrestricted", nil, "[[conv bn relu add]]"},
		{"every op on both types", []uint64{3, 3, 3, 3}, "[[conv bn relu add]]"},
		{"disjoint in the middle", []uint64{1, 1, 2, 2}, "[[conv bn] [relu add]]"},
		// bn and relu run on both types, but once joined to conv the
		// group runs on type 0 only, so add (type 1 only) stays apart.
		{"narrowing", []uint64{1, 3, 3, 2}, "[[conv bn relu]]"},
		{"an op no type runs", []uint64{1, 0, 1, 1}, "[[relu add]]"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			g := build()
			var runs *graph.DeviceSets
			if tc.runs != nil {
				runs = &graph.DeviceSets{Words: 1, Bits: tc.runs}
			}
			fu, err := graph.FuseOn(g, g.BuildAdjacency(), "vertical", runs)
			if err != nil {
				t.Fatal(err)
			}
			if got := fmt.Sprint(groupsOf(g, fu.Groups)); got != tc.want {
				t.Errorf("groups %s, want %s", got, tc.want)
			}
		})
	}
	g := build()
	if _, err := graph.FuseOn(g, g.BuildAdjacency(), "vertical", &graph.DeviceSets{Words: 1, Bits: []uint64{1}}); err == nil {
		t.Error("device sets of the wrong length were accepted")
	}
}

func TestDeviceSetsDistinct(t *testing.T) {
	s := graph.NewDeviceSets(4, 70) // two words per op
	s.Add(0, 1)
	s.Add(1, 69)
	s.Add(2, 1)
	sets, of := s.Distinct()
	if len(sets) != 3 || !slices.Equal(of, []int32{0, 1, 0, 2}) {
		t.Fatalf("Distinct: %d sets, of %v; want 3 and [0 1 0 2]", len(sets), of)
	}
	if !s.Has(1, 69) || s.Has(1, 1) || sets[1][1] != 1<<5 {
		t.Errorf("op 1's set is device 69 only: %v", sets[1])
	}
}
