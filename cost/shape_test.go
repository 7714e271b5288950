package cost

import (
	"math"
	"testing"

	"github.com/opplace/opplace/graph"
	"github.com/opplace/opplace/graph/graphtest"
)

// TestShapeRun: a run's time follows the larger of its compute line (the
// ramp kept whole) and its memory line (the fixed tensors read at their
// share w), relative to the whole op's.
func TestShapeRun(t *testing.T) {
	for _, tc := range []struct {
		name          string
		s             Shape
		share, weight float64
		want          float64
	}{
		{"no shape: the share", Shape{}, 0.25, 0.25, 0.25},
		{"compute, no ramp", Shape{Compute: 1}, 0.25, 1, 0.25},
		{"compute with ramp", Shape{Compute: 0.8, Ramp: 0.2}, 0.5, 1, 0.6},
		{"weights read whole", Shape{Memory: 1, Fixed: 0.5}, 0.25, 1, 0.625},
		{"weights shared too", Shape{Memory: 1, Fixed: 0.5}, 0.25, 0.25, 0.25},
		{"memory binds the run", Shape{Compute: 1, Memory: 0.9, Fixed: 1}, 0.5, 1, 0.9},
	} {
		if got := tc.s.Run(tc.share, tc.weight); math.Abs(got-tc.want) > 1e-12 {
			t.Errorf("%s: Run(%v, %v) = %v, want %v", tc.name, tc.share, tc.weight, got, tc.want)
		}
	}
	// The partitioners' line: exact at 1 and at, above Run between them.
	s := Shape{Compute: 1, Memory: 0.9, Fixed: 1}
	a := s.FixedAt(0.125)
	line := func(x float64) float64 { return a + (1-a)*x }
	for _, x := range []float64{1, 0.125} {
		if math.Abs(line(x)-s.Run(x, 1)) > 1e-12 {
			t.Errorf("line at %v: %v, Run %v", x, line(x), s.Run(x, 1))
		}
	}
	if line(0.5) < s.Run(0.5, 1) {
		t.Errorf("line under Run at 0.5: %v < %v", line(0.5), s.Run(0.5, 1))
	}
	if (Shape{}).FixedAt(0.5) != 0 || s.FixedAt(1) != 0 {
		t.Error("FixedAt of no shape or at share 1 is not 0")
	}
}

// TestFixedTensors: weights, what is computed from them alone and weight
// gradients (through a same-size cast) do not follow the batch; data,
// activations and a reduced gradient's inputs do.
func TestFixedTensors(t *testing.T) {
	b := graphtest.New("fixed").Input("x", 64).Param("w", 16).
		Op("cast", 0, 8, "w").          // a weight's half copy
		Op("mm", 100, 64, "x", "cast"). // an activation
		Op("dw", 100, 8, "x", "mm").    // a weight gradient, half
		Op("dw32", 0, 16, "dw").        // its cast to float32, read by the update
		Op("upd", 10, 16, "w", "dw32")
	g := b.G
	g.Ops[len(g.Ops)-1].Phase = graph.Update
	for i := range g.Ops[:len(g.Ops)-1] {
		if g.Ops[i].Name == "dw" || g.Ops[i].Name == "dw32" {
			g.Ops[i].Phase = graph.Backward
		}
	}
	// The builder's tensors are bytes of uint8; a cast keeps the element
	// count, so dw32 gets dw's.
	dw32, _ := g.TensorByName("dw32")
	g.Tensors[dw32].Shape = []int64{8}
	fixed := FixedTensors(g)
	for name, want := range map[string]bool{"x": false, "w": true, "cast": true, "mm": false, "dw": true, "dw32": true} {
		id, _ := g.TensorByName(name)
		if fixed[id] != want {
			t.Errorf("%s: fixed %v, want %v", name, fixed[id], want)
		}
	}
}
