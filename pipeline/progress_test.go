package pipeline_test

import (
	"context"
	"io"
	"reflect"
	"testing"

	"github.com/opplace/opplace/internal/progress"
	"github.com/opplace/opplace/pipeline"
)

// TestCompareProgress checks that compare counts the strategies it runs
// and that what runs inside it reports through the same context.
func TestCompareProgress(t *testing.T) {
	rec := &progress.Recorder{}
	_, err := pipeline.Compare(progress.With(context.Background(), rec), pipeline.CompareOptions{
		Options: opts("resnet50", "4xV100", nil), Strategies: []string{"dp", "pipeline:pipedream", "m-etf"},
	})
	if err != nil {
		t.Fatal(err)
	}
	var added int64
	for _, e := range rec.Events() {
		if e.Stage == "compare" && e.Op == "add" {
			added += e.N
		}
	}
	want := []string{"compare", "pipedream: micro-batch counts"}
	if got := rec.Stages(); !reflect.DeepEqual(got[:min(2, len(got))], want) || added != 3 {
		t.Errorf("stages %q, compare added %d; want %q first and 3", got, added, want)
	}
}

// BenchmarkCompareProgress is compare on ResNet-50 with no reporter and
// with a terminal's bars drawn (into nothing) from the start: the
// difference is what progress costs.
func BenchmarkCompareProgress(b *testing.B) {
	for _, bc := range []struct {
		name string
		r    func() progress.Reporter
	}{
		{"nop", progress.Nop},
		{"terminal", func() progress.Reporter { return progress.NewTerminal(io.Discard, progress.ShowAfter(0)) }},
	} {
		b.Run(bc.name, func(b *testing.B) {
			for b.Loop() {
				r := bc.r()
				_, err := pipeline.Compare(progress.With(context.Background(), r), pipeline.CompareOptions{Options: opts("resnet50", "4xV100", nil)})
				if err != nil {
					b.Fatal(err)
				}
				if t, ok := r.(*progress.Terminal); ok {
					t.Close()
				}
			}
		})
	}
}
