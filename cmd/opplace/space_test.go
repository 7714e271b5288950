package main

import (
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"github.com/opplace/opplace/plan"
)

// TestAutoSearchesThePlanSpace: auto on ResNet-50 training over four
// V100s returns a data-parallel plan in the one schema (one stage of four
// replicas, its gradient all-reduces, throughput), and lists every other
// strategy with why it lost.
func TestAutoSearchesThePlanSpace(t *testing.T) {
	code, stdout, stderr := invoke(t, "plan", filepath.Join(modelDir, "resnet50.onnx"), "--cluster", filepath.Join(clusterDir, "4xV100.yaml"), "-o", "json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	var p plan.Plan
	if err := json.Unmarshal([]byte(stdout), &p); err != nil {
		t.Fatal(err)
	}
	if p.Strategy != "auto:dp" || p.Family != "data-parallel" {
		t.Fatalf("auto chose %s (%s)", p.Strategy, p.Family)
	}
	if len(p.Stages) != 1 || p.Stages[0].Replicas != 4 || len(p.Stages[0].Devices) != 4 || len(p.AllReduces) == 0 || p.Stages[0].AllReduceBytes == 0 {
		t.Fatalf("stages %+v, %d all-reduces", p.Stages, len(p.AllReduces))
	}
	if p.Batch != 32 || p.ThroughputSamplesPerS <= 0 || p.PredictedStepMS < p.LowerBoundMS || p.LowerBoundKind != "work" {
		t.Errorf("batch %d, throughput %g, step %g, bound %g (%s)", p.Batch, p.ThroughputSamplesPerS, p.PredictedStepMS, p.LowerBoundMS, p.LowerBoundKind)
	}
	families := map[string]bool{}
	for i, c := range p.Candidates {
		families[c.Family] = true
		switch {
		case i == 0 && c.Why != "":
			t.Errorf("the first candidate is the plan kept, got %+v", c)
		case i > 0 && c.Why == "":
			t.Errorf("candidate %s lost without a reason", c.Strategy)
		}
		if c.Family == "placement" && !strings.HasPrefix(c.Why, "pruned: any placement plan takes at least") {
			t.Errorf("placement %s: %q, want pruned by the critical path", c.Strategy, c.Why)
		}
	}
	for _, f := range []string{"data-parallel", "pipeline", "placement", "hybrid"} {
		if !families[f] {
			t.Errorf("no %s candidate in %+v", f, p.Candidates)
		}
	}
}

// TestAskedStrategyNamesAlternatives: a strategy that cannot fit the
// model exits 3 and names the first cheap strategy that does. GPT-2 XL's
// training step at batch 8 peaks at 120.07 GiB on one device, more than
// an A100-80GB holds (at batch 4 it fits, at 72.11 GiB).
func TestAskedStrategyNamesAlternatives(t *testing.T) {
	code, _, stderr := invoke(t, "plan", filepath.Join(modelDir, "gpt2_xl.onnx"), "--dim", "batch=8",
		"--cluster", filepath.Join(clusterDir, "8xA100-2host.yaml"), "--strategy", "single")
	if code != 3 || !strings.Contains(stderr, "strategy single found no plan that fits") || !strings.Contains(stderr, "strategy m-topo finds a plan that fits") {
		t.Errorf("exit %d: %s", code, stderr)
	}
}
