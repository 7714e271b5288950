package strategy_test

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/opplace/opplace/sim"
	"github.com/opplace/opplace/strategy"
)

func TestSplitsBatch(t *testing.T) {
	p := problemAt(t, 4, 1<<20, 8, 1<<34, 448)
	stage := func(replicas int) sim.Stage {
		var st sim.Stage
		for d := range replicas {
			st.Replicas = append(st.Replicas, []int{d})
		}
		return st
	}
	for _, tc := range []struct {
		name   string
		m      int
		stages []sim.Stage
		want   string // "" when the plan splits the batch
	}{
		{"one device, whole batch", 1, nil, ""},
		{"one device, 7 micro-batches", 7, nil, ""},
		{"one device, 3 micro-batches", 3, nil, "does not split into 3 micro-batch(es) of whole samples"},
		{"8 replicas, 4 micro-batches", 4, []sim.Stage{stage(8)}, ""},
		{"8 replicas, 32 micro-batches", 32, []sim.Stage{stage(8)}, "32 micro-batch(es) x 8 replicas of whole samples (1.75 each)"},
		{"stages of 2 and 3 replicas", 2, []sim.Stage{stage(2), stage(3)}, "stage 1's 2 micro-batch(es) x 3 replicas"},
	} {
		err := p.SplitsBatch(&sim.Plan{MicroBatches: tc.m, Stages: tc.stages})
		var bse *strategy.BatchSplitError
		switch {
		case tc.want == "" && err != nil:
			t.Errorf("%s: %v", tc.name, err)
		case tc.want != "" && (!errors.As(err, &bse) || !strings.Contains(err.Error(), tc.want)):
			t.Errorf("%s: %v, want a BatchSplitError saying %q", tc.name, err, tc.want)
		}
	}
	// A batch unknown: every plan goes.
	if err := problemAt(t, 4, 1<<20, 8, 1<<34, 0).SplitsBatch(&sim.Plan{MicroBatches: 3, Stages: []sim.Stage{stage(3)}}); err != nil {
		t.Errorf("batch unknown: %v", err)
	}
	for _, tc := range []struct {
		batch      int64
		m, r, want int64
	}{{448, 4, 8, 14}, {448, 32, 8, 0}, {0, 4, 2, 0}, {32, 1, 4, 8}} {
		if got := strategy.MicroBatchSize(tc.batch, int(tc.m), int(tc.r)); got != tc.want {
			t.Errorf("MicroBatchSize(%d, %d, %d) = %d, want %d", tc.batch, tc.m, tc.r, got, tc.want)
		}
	}
}

// TestEveryFamilySplitsTheBatch runs every strategy auto runs on six
// devices at batches six does not divide (and at one it does): each
// plan a strategy returns gives every replica a whole number of samples
// per micro-batch, and dp on six says why it ran on fewer replicas.
func TestEveryFamilySplitsTheBatch(t *testing.T) {
	for _, batch := range []int64{8, 10, 12} {
		p := problemAt(t, 6, 1<<20, 6, 1<<34, batch)
		outs, _, err := strategy.Search(context.Background(), p, strategy.Config{}, nil)
		if err != nil {
			t.Fatal(err)
		}
		for _, o := range outs {
			if o.Plan == nil {
				continue
			}
			if err := p.SplitsBatch(o.Plan); err != nil {
				t.Errorf("batch %d: %s: %v", batch, o.Strategy, err)
			}
			if o.Strategy == "dp" && batch%6 != 0 && len(o.Plan.Stages[0].Replicas) == 6 {
				t.Errorf("batch %d: dp runs 6 replicas", batch)
			}
		}
	}
	p := problemAt(t, 6, 1<<20, 3, 1<<34, 8)
	s, err := strategy.New("dp", strategy.Config{})
	if err != nil {
		t.Fatal(err)
	}
	o := strategy.Evaluate(context.Background(), p, "dp", s)
	if o.Err == nil || !errors.Is(o.Err, strategy.ErrNotApplicable) || !strings.Contains(o.Err.Error(), "a batch of 8 samples does not split over 3 replicas") {
		t.Errorf("dp on 3 devices at batch 8: %v", o.Err)
	}
}
