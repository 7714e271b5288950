package main

import (
	"encoding/json"
	"fmt"
	"math"
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

// TestReplanProfile: replan --profile prices the new cluster with the
// measured op times, as plan --profile does: ResNet-50 at batch 1 on
// CPUs of the profile's device type (local-cpu), four then three; the
// chosen plan's step is the step plan --profile gives its strategy on
// the new cluster, and without the profile the re-plan's step differs.
func TestReplanProfile(t *testing.T) {
	dir := t.TempDir()
	cpus := func(n int) string {
		path := filepath.Join(dir, fmt.Sprintf("%dxCPU.yaml", n))
		src := fmt.Sprintf("name: %dxCPU\ndevice_types:\n  - {name: local-cpu, peak_flops: {float32: 6.67T}, memory_bandwidth: 11.3GB/s, memory: 24GiB}\n"+
			"devices:\n  - {name: \"cpu{i}\", count: %d, type: local-cpu, host: h}\nhosts:\n  - {name: h, intra: {kind: pcie, bandwidth: 10GB/s, latency: 10us}}\n", n, n)
		if err := os.WriteFile(path, []byte(src), 0o644); err != nil {
			t.Fatal(err)
		}
		return path
	}
	model := filepath.Join(modelDir, "resnet50.onnx")
	prof := filepath.Join("..", "..", "testdata", "profiles", "resnet50_b1_gorgonia_cpu.json")
	shape := []string{"--shape", "input.1=1,3,224,224"}
	old := filepath.Join(dir, "old.json")
	if code, _, stderr := invoke(t, append([]string{"plan", model, "--cluster", cpus(4), "--profile", prof, "--out", old}, shape...)...); code != 0 {
		t.Fatalf("plan: exit %d: %s", code, stderr)
	}
	three := cpus(3)
	chosen := func(args ...string) replan.Option {
		t.Helper()
		code, js, stderr := invoke(t, append(append([]string{"replan", old, "--cluster", three, "-o", "json"}, shape...), args...)...)
		if code != 0 {
			t.Fatalf("replan %v: exit %d: %s", args, code, stderr)
		}
		var res replan.Result
		if err := json.Unmarshal([]byte(js), &res); err != nil {
			t.Fatal(err)
		}
		return res.Chosen
	}
	measured := chosen("--profile", prof)
	code, js, stderr := invoke(t, append([]string{"plan", model, "--cluster", three, "--profile", prof, "--strategy", strings.TrimPrefix(measured.Strategy, "auto:"), "-o", "json"}, shape...)...)
	if code != 0 {
		t.Fatalf("plan --profile on the new cluster: exit %d: %s", code, stderr)
	}
	var p plan.Plan
	if err := json.Unmarshal([]byte(js), &p); err != nil {
		t.Fatal(err)
	}
	if math.Abs(p.PredictedStepMS-measured.StepMS) > 1e-6*p.PredictedStepMS {
		t.Errorf("replan --profile chose %s at %.3f ms; plan --profile gives it %.3f ms", measured.Strategy, measured.StepMS, p.PredictedStepMS)
	}
	if roofline := chosen(); roofline.StepMS == measured.StepMS {
		t.Errorf("replan without the profile chose a step of %.3f ms, the same as with it: the profile was not used", roofline.StepMS)
	}
}
