package partition

import (
	"fmt"
	"math/rand/v2"
	"slices"
	"testing"
)

func TestMicroBatchCounts(t *testing.T) {
	for _, tc := range []struct {
		batch int64
		max   int
		want  []int
	}{
		{0, 32, []int{1, 2, 4, 8, 16, 32}},
		{0, 6, []int{1, 2, 4}},
		{32, 32, []int{1, 2, 4, 8, 16, 32}},
		{32, 8, []int{1, 2, 4, 8}},
		{56, 56, []int{1, 2, 4, 8, 28, 56}},
		{448, 32, []int{1, 2, 4, 8, 16, 32}},
		{6, 32, []int{1, 2, 6}},
		{7, 32, []int{1, 7}},
		{1, 32, []int{1}},
		{2304, 2304, []int{1, 2, 4, 8, 16, 32, 64, 128, 256, 576, 1152, 2304}},
	} {
		if got := MicroBatchCounts(tc.batch, tc.max); !slices.Equal(got, tc.want) {
			t.Errorf("MicroBatchCounts(%d, %d) = %v, want %v", tc.batch, tc.max, got, tc.want)
		}
	}
}

// TestPlansSplitTheBatch checks that with the batch given every
// partitioner's plan gives each replica of each stage the same whole
// number of samples per micro-batch, on random chains over clusters
// whose device counts do not divide the batch (3, 5, 6, 7 devices at
// batches of 8, 12 and 30), and that fixing a micro-batch count that
// does not divide the batch is refused.
func TestPlansSplitTheBatch(t *testing.T) {
	rng := rand.New(rand.NewPCG(7, 8))
	for trial := range 12 {
		n := 6 + rng.IntN(20)
		ops := make([]fwdOp, n)
		prev := "x"
		for i := range ops {
			name := fmt.Sprintf("op%d", i)
			ops[i] = fwdOp{name, 0.5 + 4*rng.Float64(), int64(1 + rng.IntN(1<<16)), int64(rng.IntN(1 << 20)), []string{prev}}
			prev = name
		}
		devices := []int{3, 5, 6, 7}[trial%4]
		batch := []int64{8, 12, 30}[trial%3]
		for _, name := range []string{"pipedream", "exact", "gpipe"} {
			p := newTestProblem(t, buildGraph(ops, trial%2 == 0), testCluster(devices, 1<<30, giga), Options{Batch: batch, MaxMicroBatches: int(batch)})
			pl := run(t, name, p)
			for _, st := range pl.Stages {
				if batch%int64(pl.MicroBatches*st.Replicas) != 0 {
					t.Fatalf("trial %d, %s on %d devices: batch %d in %d micro-batches over stage %d's %d replicas: not whole samples",
						trial, name, devices, batch, pl.MicroBatches, st.Index, st.Replicas)
				}
			}
		}
	}
	_, err := NewProblem(nil, Options{Batch: 12, MicroBatches: 8})
	if err == nil {
		t.Fatal("8 micro-batches of a batch of 12 accepted")
	}
	if p := newTestProblem(t, buildGraph([]fwdOp{{"a", 1, 1, 0, []string{"x"}}}, false), testCluster(2, 1<<30, giga), Options{Batch: 12, MicroBatches: 3}); p.Options.MicroBatches != 3 {
		t.Fatal("3 micro-batches of a batch of 12 not kept")
	}
}
