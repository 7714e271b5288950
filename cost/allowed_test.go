package cost_test

import (
	"fmt"
	"testing"

	"github.com/opplace/opplace/cost"
	"github.com/opplace/opplace/graph"
	"github.com/opplace/opplace/graph/graphtest"
)

// TestWithAllowed: the user's rules narrow CanRun per device, leave op
// times alone, split device classes where devices of one type are
// allowed different ops, and travel through Restrict by device name.
func TestWithAllowed(t *testing.T) {
	g := graphtest.New("g").Input("x", 8).Op("a", 1e6, 8, "x").Op("b", 1e6, 8, "a").G
	c := graphtest.Cluster(1e9, 0, graphtest.Device{FLOPS: 1e9, Memory: 1 << 20}, graphtest.Device{FLOPS: 1e9, Memory: 1 << 20},
		graphtest.Device{FLOPS: 1e9, Memory: 1 << 20}, graphtest.Device{FLOPS: 2e9, Memory: 1 << 20})
	t0 := cost.NewTable(g, c, cost.Roofline{ComputeEfficiency: 1, MemoryEfficiency: 1})
	if got := fmt.Sprint(t0.Classes()); got != "[[0 1 2] [3]]" || t0.Restricted() {
		t.Fatalf("unrestricted classes %s", got)
	}
	sets := graph.NewDeviceSets(len(g.Ops), 4)
	for d := 0; d < 4; d++ {
		sets.Add(0, d)
		if d != 1 {
			sets.Add(1, d) // b may not run on d1
		}
	}
	tab := t0.WithAllowed(sets)
	if tab.CanRun(1, 1) || !tab.CanRun(0, 1) || !tab.CanRun(1, 2) || !tab.Restricted() {
		t.Errorf("CanRun ignores the allowed sets")
	}
	if tab.OpTime(1, 1) != t0.OpTime(1, 1) {
		t.Errorf("allowed sets changed an op time")
	}
	if got := fmt.Sprint(tab.Classes()); got != "[[0 2] [1] [3]]" {
		t.Errorf("classes %s, want [[0 2] [1] [3]]", got)
	}
	sub := tab.Restrict(c.Sub([]int{3, 1}))
	if !sub.CanRun(1, 0) || sub.CanRun(1, 1) {
		t.Errorf("Restrict lost which device is which: b on d3 %v, on d1 %v", sub.CanRun(1, 0), sub.CanRun(1, 1))
	}
}
