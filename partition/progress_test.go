package partition

import (
	"context"
	"math/rand/v2"
	"reflect"
	"slices"
	"testing"

	"github.com/opplace/opplace/internal/progress"
)

// TestProgress checks what the partitioners report through the context:
// each counted stage starts with the micro-batch counts as its total,
// adds up to exactly that and ends, every started task ends, and the
// plan is the same as with no reporter.
func TestProgress(t *testing.T) {
	c := testCluster(4, 1<<40, giga)
	graphOf := func(n int, tiny float64) []fwdOp { return randomDAG(rand.New(rand.NewPCG(1, 1)), n, tiny) }
	tests := []struct {
		name, partitioner string
		ops               []fwdOp
		opts              Options
		want              []string // stages started, in order
		counted           []string // stages with a total: one unit per micro-batch count
	}{
		{"exact", "exact", graphOf(8, 0), Options{},
			[]string{"exact: pipedream pass", "exact: enumerating downsets", "exact: downsets"},
			[]string{"exact: pipedream pass", "exact: downsets"}},
		// Searching at most 2 downsets merges side branches, so exact
		// searches the unit graph under the reduced optimum ...
		{"exact reduced", "exact", graphOf(14, 0.4), Options{SearchIdeals: 2, Epsilon: 0.01},
			[]string{"exact: pipedream pass", "exact: enumerating downsets", "exact: downsets", "exact: searching the unit graph under the reduced optimum"},
			[]string{"exact: pipedream pass", "exact: downsets"}},
		// ... or, without that search, bounds what merging cost.
		{"exact reduced bound", "exact", graphOf(14, 0.4), Options{SearchIdeals: 2, Epsilon: 0.01},
			[]string{"exact: pipedream pass", "exact: enumerating downsets", "exact: downsets", "exact: bounding the gap"},
			[]string{"exact: pipedream pass", "exact: downsets"}},
		{"pipedream", "pipedream", graphOf(8, 0), Options{},
			[]string{"pipedream: micro-batch counts"}, []string{"pipedream: micro-batch counts"}},
		{"gpipe", "gpipe", graphOf(8, 0), Options{},
			[]string{"gpipe: micro-batch counts"}, []string{"gpipe: micro-batch counts"}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.name == "exact reduced bound" {
				withoutUnitProof(t)
			}
			tt.opts.MaxMicroBatches = 8
			p := newTestProblem(t, buildGraph(tt.ops, true), c, tt.opts)
			Ms := int64(len(p.microBatchCandidates()))
			part, err := New(tt.partitioner)
			if err != nil {
				t.Fatal(err)
			}
			rec := &progress.Recorder{}
			got, err := part.Partition(progress.With(context.Background(), rec), p)
			if err != nil {
				t.Fatal(err)
			}
			want, err := part.Partition(context.Background(), p)
			if err != nil {
				t.Fatal(err)
			}
			if !reflect.DeepEqual(got, want) {
				t.Errorf("the plan differs with a reporter:\n%+v\n%+v", got, want)
			}
			stages := slices.Compact(rec.Stages())
			if !reflect.DeepEqual(stages, tt.want) {
				t.Errorf("stages %q, want %q", stages, tt.want)
			}
			started, added, done := map[string]int64{}, map[string]int64{}, map[string]int{}
			for _, e := range rec.Events() {
				switch e.Op {
				case "start":
					started[e.Stage] = e.N
					if _, ok := done[e.Stage]; !ok {
						done[e.Stage] = 0
					}
					done[e.Stage]--
				case "add":
					added[e.Stage] += e.N
				case "done":
					done[e.Stage]++
				case "set":
					t.Errorf("%s: unexpected set", e.Stage)
				}
			}
			for s, d := range done {
				if d != 0 {
					t.Errorf("%s: %d more starts than dones", s, -d)
				}
			}
			for _, s := range tt.counted {
				if started[s] != Ms || added[s] != Ms {
					t.Errorf("%s: total %d, added %d; want %d micro-batch counts", s, started[s], added[s], Ms)
				}
			}
		})
	}
}
