package strategy_test

import (
	"context"
	"testing"

	"github.com/opplace/opplace/internal/progress"
	"github.com/opplace/opplace/strategy"
)

// TestSearchProgress checks that auto counts every strategy, the pruned
// ones included, and ends its task.
func TestSearchProgress(t *testing.T) {
	p := problem(t, 4, 1<<20, 4, 1<<34)
	rec := &progress.Recorder{}
	outs, _, err := strategy.Search(progress.With(context.Background(), rec), p, strategy.Config{}, nil)
	if err != nil {
		t.Fatal(err)
	}
	n := int64(len(strategy.AutoStrategies))
	pruned := 0
	for _, o := range outs {
		if o.Pruned != "" {
			pruned++
		}
	}
	var total, added int64
	done := 0
	for _, e := range rec.Events() {
		if e.Stage != "auto" {
			continue
		}
		switch e.Op {
		case "start":
			total = e.N
		case "add":
			added += e.N
		case "done":
			done++
		}
	}
	if total != n || added != n || done != 1 {
		t.Errorf("auto: total %d, added %d, done %d times; want %d, %d, 1 (%d pruned)", total, added, done, n, n, pruned)
	}
	if pruned == 0 {
		t.Log("no strategy pruned on this problem")
	}
}
