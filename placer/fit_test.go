package placer

import (
	"errors"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/opplace/opplace/cost"
	"github.com/opplace/opplace/graph/graphtest"
	"github.com/opplace/opplace/sim"
)

// TestPlaceFitting drives placeFitting with schedulers that ignore
// memory: a and b, whose 600 B outputs are graph outputs, kept to the
// end, do not fit one 1000-byte device.
// One scheduler puts both on d0 until it is given less than d0 holds,
// and gets a second round; one always does, and is refused after the
// last round. The result placeFitting returns is the simulator's.
func TestPlaceFitting(t *testing.T) {
	b := graphtest.New("two").Input("x", 8).Op("a", 1e9, 600, "x").Op("b", 1e9, 600, "x").Output("a", "b")
	dev := graphtest.Device{FLOPS: 1e9, Memory: 1000}
	p, err := NewProblem(b.G, cost.NewTable(b.G, graphtest.Cluster(1e9, 0, dev, dev), cost.Roofline{ComputeEfficiency: 1, MemoryEfficiency: 1}))
	if err != nil {
		t.Fatal(err)
	}
	var seen [][]int64
	place := func(split bool) func(*listState) (sim.Placement, error) {
		return func(s *listState) (sim.Placement, error) {
			seen = append(seen, slices.Clone(s.capacity))
			for _, op := range p.Order {
				d := 0
				if split && s.capacity[0] < 1000 && b.G.Ops[op].Name == "b" {
					d = 1
				}
				s.schedule(op, d, s.startOn(op, d))
			}
			return s.placement(), nil
		}
	}
	pl, res, err := placeFitting(p, place(true))
	if err != nil {
		t.Fatal(err)
	}
	if want, err := p.Simulate(pl); err != nil || !reflect.DeepEqual(res, want) {
		t.Errorf("placeFitting's result is not the simulator's for its placement (%v)", err)
	}
	// Round 0 peaks at 1208 B on d0 (x, a and b), as predicted: 208 B
	// over, so d0 is taken as 208 B below 1000.
	if want := [][]int64{{1000, 1000}, {792, 1000}}; !slices.EqualFunc(seen, want, slices.Equal[[]int64]) {
		t.Errorf("capacities per round %v, want %v", seen, want)
	}
	if pl.Device[0] == pl.Device[1] {
		t.Errorf("a and b both on d%d", pl.Device[0])
	}
	seen = nil
	_, _, err = placeFitting(p, place(false))
	var inf *InfeasibleError
	if !errors.As(err, &inf) || !strings.Contains(inf.Detail, "placed 5 times, the simulator still found d0 over its memory: it peaks at 1.18 KiB, which holds 1000 B") {
		t.Errorf("got %v", err)
	}
	if len(seen) != fitRounds+1 {
		t.Errorf("placed %d times, want %d", len(seen), fitRounds+1)
	}
}
