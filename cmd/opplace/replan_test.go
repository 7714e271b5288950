package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/opplace/opplace/plan"
	"github.com/opplace/opplace/replan"
)

// bertPlan plans bert_base at batch 32 on 4xV100 into dir and returns the
// plan file.
func bertPlan(t *testing.T, dir string) string {
	t.Helper()
	old := filepath.Join(dir, "old.json")
	if code, _, stderr := invoke(t, "plan", filepath.Join(modelDir, "bert_base.onnx"), "--batch", "32", "--cluster", filepath.Join(clusterDir, "4xV100.yaml"),
		"--out", old); code != 0 {
		t.Fatalf("plan: exit %d: %s", code, stderr)
	}
	return old
}

// TestReplanCommand re-plans bert_base from 4xV100 to 3xV100 through the
// command: the table, JSON and YAML agree, and --out is a plan file that
// opplace plan --placement scores to the same step.
func TestReplanCommand(t *testing.T) {
	dir := t.TempDir()
	old := bertPlan(t, dir)
	newCluster := filepath.Join(clusterDir, "3xV100.yaml")
	out := filepath.Join(dir, "new.json")
	code, table, stderr := invoke(t, "replan", old, "--cluster", newCluster, "--out", out)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	for _, want := range []string{"new cluster:  3xV100: 3 kept, lost gpu3, added none", "old plan now: cannot run: it runs on gpu3", "chosen:", "from scratch:",
		"break-even:", "candidates (objective = step x 1000 + migration):"} {
		if !strings.Contains(table, want) {
			t.Errorf("the table lacks %q:\n%s", want, table)
		}
	}
	code, js, stderr := invoke(t, "replan", old, "--cluster", newCluster, "-o", "json")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	var res struct {
		Version int `json:"version"`
		replan.Result
	}
	if err := json.Unmarshal([]byte(js), &res); err != nil {
		t.Fatal(err)
	}
	if res.Version != 1 || res.Cluster != "3xV100" || res.OldCluster != "4xV100" || res.Batch != 32 || len(res.Candidates) == 0 {
		t.Fatalf("JSON: %+v", res)
	}
	code, ym, stderr := invoke(t, "replan", old, "--cluster", newCluster, "-o", "yaml")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	var fromYAML map[string]any
	if err := yaml.Unmarshal([]byte(ym), &fromYAML); err != nil {
		t.Fatal(err)
	}
	var fromJSON map[string]any
	if err := json.Unmarshal([]byte(js), &fromJSON); err != nil {
		t.Fatal(err)
	}
	if fromYAML["cluster"] != fromJSON["cluster"] || len(fromYAML["candidates"].([]any)) != len(fromJSON["candidates"].([]any)) {
		t.Errorf("YAML and JSON differ: %v against %v", fromYAML["cluster"], fromJSON["cluster"])
	}
	p, err := plan.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	if p.Cluster != "3xV100" || p.PredictedStepMS != res.Chosen.StepMS {
		t.Fatalf("--out: a plan on %s of %g ms; the chosen's step is %g ms", p.Cluster, p.PredictedStepMS, res.Chosen.StepMS)
	}
	code, given, stderr := invoke(t, "plan", filepath.Join(modelDir, "bert_base.onnx"), "--batch", "32", "--cluster", newCluster, "--placement", out, "-o", "json")
	if code != 0 {
		t.Fatalf("plan --placement: exit %d: %s", code, stderr)
	}
	var again plan.Plan
	if err := json.Unmarshal([]byte(given), &again); err != nil {
		t.Fatal(err)
	}
	if again.PredictedStepMS != p.PredictedStepMS {
		t.Errorf("the re-planned plan given back to plan takes %g ms, %g ms as re-planned", again.PredictedStepMS, p.PredictedStepMS)
	}
}

// TestReplanCommandErrors: every refusal is one line and its exit code,
// and leaves no --out file.
func TestReplanCommandErrors(t *testing.T) {
	dir := t.TempDir()
	old := bertPlan(t, dir)
	tiny := filepath.Join(dir, "tiny.yaml")
	if err := os.WriteFile(tiny, []byte(`name: tiny
hosts: [{name: node0}]
devices:
  - {name: gpu0, type: V100-16GB, host: node0, memory: 100MiB}
  - {name: gpu1, type: V100-16GB, host: node0, memory: 100MiB}
`), 0o644); err != nil {
		t.Fatal(err)
	}
	three := filepath.Join(clusterDir, "3xV100.yaml")
	for _, tc := range []struct {
		name string
		args []string
		code int
		want string
	}{
		{"no cluster", []string{old}, exitInvalid, "--cluster"},
		{"no such plan", []string{filepath.Join(dir, "none.json"), "--cluster", three}, exitInvalid, "none.json"},
		{"a cluster for a plan", []string{three, "--cluster", three}, exitInvalid, "3xV100.yaml"},
		{"bad format", []string{old, "--cluster", three, "-o", "csv"}, exitInvalid, "-o"},
		{"bad bandwidth", []string{old, "--cluster", three, "--checkpoint-bandwidth", "fast"}, exitInvalid, "--checkpoint-bandwidth"},
		{"no steps", []string{old, "--cluster", three, "--amortize-steps", "0"}, exitInvalid, "--amortize-steps"},
		{"another model", []string{old, "--cluster", three, "--model", filepath.Join(modelDir, "gpt2_small.onnx")}, exitInvalid, "another model"},
		{"another batch", []string{old, "--cluster", three, "--batch", "16"}, exitInvalid, "batch is 32"},
		{"no room", []string{old, "--cluster", tiny}, exitInfeasible, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			out := filepath.Join(dir, strings.ReplaceAll(tc.name, " ", "-")+".json")
			code, stdout, stderr := invoke(t, append([]string{"replan", "--out", out}, tc.args...)...)
			if code != tc.code || !strings.Contains(stderr, tc.want) || strings.Count(strings.TrimSpace(stderr), "\n") != 0 {
				t.Errorf("exit %d, stderr %q; want exit %d naming %q", code, stderr, tc.code, tc.want)
			}
			if stdout != "" {
				t.Errorf("stdout %q on a failure", stdout)
			}
			if _, err := os.Stat(out); err == nil {
				t.Errorf("a failed re-plan wrote %s", out)
			}
		})
	}
}
