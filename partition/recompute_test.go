package partition

import (
	"errors"
	"fmt"
	"math"
	"testing"
)

// TestRecomputeModel: four modules /l<i>/, each a layer a writing 1000
// bytes that only the module's layer b (writing 10 bytes, the next
// module's input) and a's backward read. At one micro-batch on two
// devices, a stage of two modules stashes 2×1010 bytes: more than the
// 1500 each device holds, and one stage of four more. Recomputing, a
// stage stashes the checkpoints (b's outputs) and what it receives, plus
// one module's a once, and its backward runs its forward again: it fits,
// and the estimate grows by the forward time of the slowest stage.
func TestRecomputeModel(t *testing.T) {
	var ops []fwdOp
	prev := "x"
	for i := 0; i < 4; i++ {
		a, b := fmt.Sprintf("/l%d/a", i), fmt.Sprintf("/l%d/b", i)
		ops = append(ops, fwdOp{name: a, gflops: 1, out: 1000, inputs: []string{prev}}, fwdOp{name: b, gflops: 1, out: 10, inputs: []string{a}})
		prev = b
	}
	g := buildGraph(ops, true)
	c := testCluster(2, 1500, 1e12)
	part, err := New("pipedream")
	if err != nil {
		t.Fatal(err)
	}
	_, err = part.Partition(t.Context(), newTestProblem(t, g, c, Options{MicroBatches: 1}))
	var inf *InfeasibleError
	if !errors.As(err, &inf) {
		t.Fatalf("without recomputation: %v; want no split that fits", err)
	}
	rc := run(t, "pipedream", newTestProblem(t, g, c, Options{MicroBatches: 1, Recompute: true}))
	for i, st := range rc.Stages {
		// Its checkpoints (10 bytes a module), what it receives, and one
		// module's a (1000 bytes), each replica's share.
		if r := int64(len(st.DeviceIndex)); st.PeakMemoryBytes > 1500 || st.PeakMemoryBytes < 1000/r {
			t.Errorf("stage %d peaks at %d bytes; want one module's 1000 and its checkpoints", i, st.PeakMemoryBytes)
		}
	}
	plain := run(t, "pipedream", newTestProblem(t, g, testCluster(2, 1<<30, 1e12), Options{MicroBatches: 1}))
	// 8 GFLOP of forward at 1 GFLOP/s on two devices, as two stages or
	// two replicas: recomputing adds the slowest stage's forward, 4 s.
	if d := rc.StepMs - plain.StepMs; math.Abs(d-4000) > 1e-6 {
		t.Errorf("estimate %g ms, without recomputation %g ms: want 4 s more", rc.StepMs, plain.StepMs)
	}
	t.Logf("%d stages recomputing, %g ms; %d without, %g ms", len(rc.Stages), rc.StepMs, len(plain.Stages), plain.StepMs)
}
