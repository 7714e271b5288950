package pipeline_test

import (
	"context"
	"testing"

	"github.com/opplace/opplace/pipeline"
)

// TestPlansStateWholeMicroBatches plans real models at batches the
// clusters' device counts do not all divide, with every family, and
// checks each kept plan is launchable as written: every stage's
// micro_batch_size × micro-batches × replicas is the batch exactly.
func TestPlansStateWholeMicroBatches(t *testing.T) {
	if testing.Short() {
		t.Skip("plans four models")
	}
	for _, tc := range []struct {
		model, cluster, strategy string
		batch                    int64
	}{
		{"gpt2_small", "4xV100", "auto", 12},
		{"gpt2_small", "8xA100-2host", "auto", 24},
		{"bert_base", "hetero", "pipeline:exact", 10},
		{"resnet50", "8xA100-2host", "dp", 36},
		// The tensor family accumulates gradients when one micro-batch
		// does not fit: 108.69 GiB per V100 at batch 256 without.
		{"gpt2_small", "4xV100", "tensor", 256},
	} {
		o := opts(tc.model, tc.cluster, map[string]int64{"batch": tc.batch})
		if tc.model == "resnet50" {
			o.Import.Dims = nil
			o.Import.Shapes = map[string][]int64{"input.1": {tc.batch, 3, 224, 224}}
		}
		o.Strategy = tc.strategy
		res, err := pipeline.Run(context.Background(), o)
		if err != nil {
			t.Fatalf("%s on %s at batch %d, %s: %v", tc.model, tc.cluster, tc.batch, tc.strategy, err)
		}
		p := res.Plan
		if p.Batch != tc.batch || !p.Fits {
			t.Fatalf("%s on %s: batch %d, fits %v", tc.model, tc.cluster, p.Batch, p.Fits)
		}
		for _, st := range p.Stages {
			if st.MicroBatchSize < 1 || st.MicroBatchSize*int64(max(p.MicroBatches, 1)*st.Replicas) != p.Batch {
				t.Errorf("%s on %s, %s: stage %d: %d samples x %d micro-batches x %d replicas is not the batch of %d",
					tc.model, tc.cluster, p.Strategy, st.Index, st.MicroBatchSize, p.MicroBatches, st.Replicas, p.Batch)
			}
		}
		if tc.strategy == "tensor" && p.MicroBatches < 2 {
			t.Errorf("tensor at batch %d: %d micro-batches", tc.batch, p.MicroBatches)
		}
	}
}
