package pipeline_test

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/opplace/opplace/pipeline"
	"github.com/opplace/opplace/plan"
)

// runtimePlan plans a model under a runtime and returns the plan.
func runtimePlan(t *testing.T, model, clusterPath, runtime, strategyName string, batch int64, mode string) *plan.Plan {
	t.Helper()
	res, err := pipeline.Run(context.Background(), pipeline.Options{
		ModelPath: model, ClusterPath: clusterPath, Strategy: strategyName, Mode: mode,
		Runtime: runtime, Precision: "amp-bf16",
		Import: pipeline.ImportOptions{Dims: map[string]int64{"batch": batch}},
	})
	if err != nil {
		t.Fatal(err)
	}
	return res.Plan
}

// TestRuntimeFusedAttention: under a runtime with a fused attention kernel
// every layer's attention core of the real exports is one Attention op
// that lists the model's ops it runs (causal for the decoders, whose
// mask is a stored buffer; not for BERT, whose padding mask comes from
// an input), and the step stores no score matrix: less peak memory and
// a shorter step than the same runtime without the kernel (eager).
func TestRuntimeFusedAttention(t *testing.T) {
	one := writeCluster(t, 1, "A100-80GB")
	for _, tc := range []struct {
		model  string
		batch  int64
		layers int
		causal bool
	}{
		{filepath.Join(models, "gpt2_small.onnx"), 8, 12, true},
		{filepath.Join(models, "bert_base.onnx"), 16, 12, false},
		{filepath.Join(llmModels, "megatron_1.7b.onnx"), 1, 24, true},
	} {
		t.Run(filepath.Base(tc.model), func(t *testing.T) {
			if _, err := os.Stat(tc.model); err != nil {
				t.Skipf("model absent: %v", err)
			}
			eager := runtimePlan(t, tc.model, one, "eager", "single", tc.batch, "")
			sdpa := runtimePlan(t, tc.model, one, "eager-sdpa", "single", tc.batch, "")
			if eager.Runtime != "eager" || sdpa.Runtime != "eager-sdpa" {
				t.Errorf("plans name runtimes %q and %q", eager.Runtime, sdpa.Runtime)
			}
			fused := 0
			for _, op := range sdpa.Ops {
				if op.Type == "Softmax" && op.Phase == "forward" && strings.Contains(op.Name, "attn") {
					t.Errorf("attention softmax %s left unfused", op.Name)
				}
				if len(op.Covers) == 0 {
					continue
				}
				fused++
				if op.Type != "Attention" || op.Phase != "forward" {
					t.Errorf("%s (%s, %s) covers %v", op.Name, op.Type, op.Phase, op.Covers)
				}
			}
			if fused != tc.layers {
				t.Errorf("%d fused attention ops, want one per layer (%d)", fused, tc.layers)
			}
			if got := len(eager.Ops) - len(sdpa.Ops); got <= 0 {
				t.Errorf("eager-sdpa plans %d ops, eager %d", len(sdpa.Ops), len(eager.Ops))
			}
			if sdpa.Devices[0].PeakMemoryBytes >= eager.Devices[0].PeakMemoryBytes || sdpa.PredictedStepMS >= eager.PredictedStepMS {
				t.Errorf("fused attention: %.1f ms, peak %d B; written out: %.1f ms, %d B",
					sdpa.PredictedStepMS, sdpa.Devices[0].PeakMemoryBytes, eager.PredictedStepMS, eager.Devices[0].PeakMemoryBytes)
			}
			t.Logf("eager %.1f ms %.2f GiB, eager-sdpa %.1f ms %.2f GiB", eager.PredictedStepMS, float64(eager.Devices[0].PeakMemoryBytes)/(1<<30),
				sdpa.PredictedStepMS, float64(sdpa.Devices[0].PeakMemoryBytes)/(1<<30))
		})
	}
}

// TestRuntimeAttentionHeads: a tensor-parallel plan under torch.compile
// splits the fused attention over heads, so every member runs a share.
func TestRuntimeAttentionHeads(t *testing.T) {
	p := runtimePlan(t, filepath.Join(models, "gpt2_small.onnx"), filepath.Join(clusters, "8xA100-2host.yaml"), "compile", "tensor", 8, "")
	n := 0
	for _, op := range p.Ops {
		if op.Type == "Attention" && op.Phase == "forward" {
			n++
			if op.Shard != "split:1" {
				t.Errorf("%s runs %q, want split over heads (split:1)", op.Name, op.Shard)
			}
		}
	}
	if n != 12 {
		t.Errorf("%d fused attention ops, want 12", n)
	}
}

// TestRuntimeErrors: a fusion mode the runtime does not run, and an
// unknown runtime, are input errors that name the runtime and the choices.
func TestRuntimeErrors(t *testing.T) {
	for _, tc := range []struct {
		runtime, fusion, want string
	}{
		{"eager", "hybrid", "runtime eager runs fusion none, not hybrid"},
		{"tensorrt", "", `unknown runtime "tensorrt": use auto, eager, eager-sdpa, compile, onnxruntime, xla`},
	} {
		_, err := pipeline.Run(context.Background(), pipeline.Options{
			ModelPath: filepath.Join(models, "gpt2_small.onnx"), ClusterPath: filepath.Join(clusters, "4xV100.yaml"),
			Runtime: tc.runtime, Fusion: tc.fusion, Import: pipeline.ImportOptions{Dims: map[string]int64{"batch": 2}},
		})
		var in *pipeline.InputError
		if !errors.As(err, &in) || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("--runtime %s --fusion %s: %v, want an input error saying %q", tc.runtime, tc.fusion, err, tc.want)
		}
	}
}
