package replan_test

import (
	"bytes"
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/opplace/opplace/pipeline"
	"github.com/opplace/opplace/plan"
	"github.com/opplace/opplace/replan"
)

// TestReplanKeepsRuntime: a plan made for a runtime that fuses attention
// places the fused ops, so the re-plan runs under the same runtime (the
// default: the plan's) and the new plan names it; another runtime is an
// input error.
func TestReplanKeepsRuntime(t *testing.T) {
	ctx := context.Background()
	old, err := pipeline.Run(ctx, pipeline.Options{ModelPath: models + "gpt2_small.onnx", ClusterPath: clusters + "8xA100-2host.yaml",
		Strategy: "dp", Runtime: "compile", Precision: "amp-bf16", Import: pipeline.ImportOptions{Batch: 8}})
	if err != nil {
		t.Fatal(err)
	}
	var buf bytes.Buffer
	if err := plan.Write(&buf, old.Plan, plan.JSON); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "compile.json")
	if err := os.WriteFile(path, buf.Bytes(), 0o644); err != nil {
		t.Fatal(err)
	}
	opts := replan.Options{PlanPath: path, ModelPath: models + "gpt2_small.onnx", ClusterPath: clusters + "7xA100-2host.yaml", AmortizeSteps: 1000}
	res, err := replan.Run(ctx, opts)
	if err != nil {
		t.Fatal(err)
	}
	if res.Plan.Runtime != "compile" {
		t.Errorf("the re-plan runs under %q, want the plan's compile", res.Plan.Runtime)
	}
	opts.Planning.Runtime = "eager"
	_, err = replan.Run(ctx, opts)
	var in *pipeline.InputError
	if !errors.As(err, &in) || !strings.Contains(err.Error(), "the plan was made for runtime compile, not eager") {
		t.Errorf("another runtime: %v, want an input error naming both", err)
	}
}
