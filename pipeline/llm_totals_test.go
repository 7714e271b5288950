package pipeline_test

import (
	"context"
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/opplace/opplace/internal/shapes"
	"github.com/opplace/opplace/pipeline"
	"github.com/opplace/opplace/strategy"
)

// TestLLMStepTotals imports, trains, fuses, costs and bounds Megatron-LM's
// 145.6B GPT under bf16 autocast at a global batch of 2,304 (its Table 1
// row: forward FLOPs 1.4e18, past the 2^60 the import once refused) and
// of 16,384 sequences (33.5M tokens, a step of 3.0e19 FLOPs, past int64),
// and checks that every total and bound is finite and positive. The
// search itself is left out: it is the bounds of a small cluster that
// count sums here (the search at Selene's 1,536 GPUs is slow, issue 32).
func TestLLMStepTotals(t *testing.T) {
	path := filepath.Join(llmModels, "megatron_145b.onnx")
	if _, err := os.Stat(path); err != nil {
		t.Skipf("shared LLMs absent: %v", err)
	}
	for _, batch := range []int64{2304, 16384} {
		o := pipeline.Options{
			ModelPath:   path,
			ClusterPath: filepath.Join(clusters, "8xA100-2host.yaml"),
			Import:      pipeline.ImportOptions{Dims: map[string]int64{"batch": batch}},
			Precision:   "amp-bf16",
			Strategy:    "pipeline",
		}
		prob, _, err := pipeline.Prepare(context.Background(), o)
		if err != nil {
			t.Fatalf("batch %d: %v", batch, err)
		}
		flops, macs := shapes.WorkTotals(prob.Graph)
		// The paper's count (eq. 3 without the recomputed forward pass,
		// 72·B·s·l·h²·(1 + s/(6h) + V/(16·l·h))) is a floor on the step's
		// FLOPs: the graph adds norms, softmaxes and casts.
		const s, l, h, v = 2048.0, 80.0, 12288.0, 51200.0
		paper := 72 * float64(batch) * s * l * h * h * (1 + s/(6*h) + v/(16*l*h))
		if !(flops >= paper && flops < 1.2*paper && macs > 0 && macs < flops) {
			t.Errorf("batch %d: step FLOPs %.4g, MACs %.4g; want FLOPs in [%.4g, 1.2×) and MACs below them", batch, flops, macs, paper)
		}
		if batch == 16384 && flops <= math.MaxInt64 {
			t.Errorf("batch %d: step FLOPs %.4g do not pass int64; the test checks nothing", batch, flops)
		}
		b := strategy.SpaceBound(prob, strategy.FamilyPipeline)
		if len(b.Parts) == 0 {
			t.Fatalf("batch %d: no bound", batch)
		}
		for _, p := range b.Parts {
			if math.IsNaN(p.Seconds) || math.IsInf(p.Seconds, 0) || p.Seconds < 0 {
				t.Errorf("batch %d: bound %s is %v", batch, p.Kind, p.Seconds)
			}
		}
		t.Logf("batch %d: step %.4g FLOPs, bound %v", batch, flops, b.Parts)
	}
}
