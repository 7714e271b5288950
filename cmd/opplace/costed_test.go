package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/opplace/opplace/plan"
)

const costedDir = "../../testdata/costed"

// TestPlanCosted plans the costed-graph examples end to end: measured
// times, no ONNX, told apart by content.
func TestPlanCosted(t *testing.T) {
	for _, tc := range []struct {
		file, cluster string
		ops           int
		strategy      string
		step          float64
	}{
		{"tiny.json", "hetero", 4, "single", 5}, // hand-computed in costed/plan_test.go
		{"mlp_train.json", "4xV100", 10, "auto", 0},
		{"mlp_train.json", "hetero", 10, "auto", 0},
		{"bert24_layers_training.json", "8xA100-2host", 64, "auto", 0},
	} {
		t.Run(tc.file+"/"+tc.cluster, func(t *testing.T) {
			code, stdout, stderr := invoke(t, "plan", filepath.Join(costedDir, tc.file),
				"--cluster", filepath.Join(clusterDir, tc.cluster+".yaml"), "--strategy", tc.strategy, "-o", "json")
			if code != 0 {
				t.Fatalf("exit %d: %s", code, stderr)
			}
			var p plan.Plan
			if err := json.Unmarshal([]byte(stdout), &p); err != nil {
				t.Fatalf("plan is not JSON: %v", err)
			}
			if len(p.Ops) != tc.ops || !p.Fits || !(p.PredictedStepMS > 0) {
				t.Errorf("%d ops (want %d), fits %v, step %v ms", len(p.Ops), tc.ops, p.Fits, p.PredictedStepMS)
			}
			if tc.step != 0 && p.PredictedStepMS != tc.step {
				t.Errorf("step %v ms, want %v", p.PredictedStepMS, tc.step)
			}
		})
	}
}

func TestPlanCostedByContent(t *testing.T) {
	src, err := os.ReadFile(filepath.Join(costedDir, "tiny.json"))
	if err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(t.TempDir(), "profile.txt")
	os.WriteFile(path, src, 0o644)
	code, stdout, stderr := invoke(t, "plan", path, "--cluster", filepath.Join(clusterDir, "hetero.yaml"), "--strategy", "single", "-o", "table")
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	if !strings.Contains(stdout, "5.000 ms predicted") {
		t.Errorf("table does not show the hand-computed 5 ms step:\n%s", stdout)
	}
}

func TestPlanCostedBadFile(t *testing.T) {
	dir := t.TempDir()
	for _, tc := range []struct{ name, content, want string }{
		{"negative.json", `{"format": "opplace-costed-graph/v1", "ops": [{"name": "a", "times_ms": {"T4": -1}}]}`,
			"negative.json: ops[0].times_ms.T4: negative time -1"},
		{"unknown.json", `{"format": "opplace-costed-graph/v1", "ops": [{"name": "a", "times_ms": {"T4": 1}}], "edges": [{"from": "a", "to": "b"}]}`,
			`unknown.json: edges[0].to: no op is named "b"`},
		{"peer.json", `{"maxSizePerFPGA": 1, "nodes": [{"id": 1, "cpuLatency": 1, "fpgaLatency": 1, "size": 0}], "edges": [{"sourceId": 1, "destId": 2, "size": 1}]}`,
			"peer.json: edges[0].destId: no node has id 2"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			path := filepath.Join(dir, tc.name)
			os.WriteFile(path, []byte(tc.content), 0o644)
			out := filepath.Join(dir, "plan-"+tc.name)
			code, _, stderr := invoke(t, "plan", path, "--cluster", filepath.Join(clusterDir, "hetero.yaml"), "--out", out)
			if code != 2 {
				t.Errorf("exit %d, want 2 (invalid input); stderr: %s", code, stderr)
			}
			if !strings.Contains(stderr, tc.want) || strings.Count(strings.TrimSpace(stderr), "\n") != 0 {
				t.Errorf("stderr %q: want one line containing %q", stderr, tc.want)
			}
			if _, err := os.Stat(out); !os.IsNotExist(err) {
				t.Errorf("a plan file was left behind: %v", err)
			}
		})
	}
}
