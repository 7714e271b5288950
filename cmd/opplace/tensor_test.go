package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/opplace/opplace/plan"
)

// TestTensorParallelMegatron plans GPT-2 small's training step with
// tensor parallelism and checks that the search, not a rule, split
// every block as Megatron-LM does: the QKV projection by columns, the
// attention by heads, its output projection by rows, FC1 by columns and
// FC2 by rows; that the plan records each op's split and the group's
// collectives, every member holding what the first does; and that
// auto chooses it on 8xA100-2host, where it beats every other family.
// At batch 1 (1024 tokens) the weights outweigh the activations, so
// splitting weights beats splitting tokens; at batch 8 the search keeps
// Megatron's attention but splits the MLP by tokens, 91.1 ms against
// 91.8 ms all Megatron when measured.
func TestTensorParallelMegatron(t *testing.T) {
	args := []string{"plan", filepath.Join(modelDir, "gpt2_small.onnx"), "--batch", "1",
		"--cluster", filepath.Join(clusterDir, "8xA100-2host.yaml"), "-o", "json"}
	code, stdout, stderr := invoke(t, append(args, "--strategy", "tensor")...)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	var p plan.Plan
	if err := json.Unmarshal([]byte(stdout), &p); err != nil {
		t.Fatal(err)
	}
	if p.Family != "tensor" || p.TensorParallel < 2 || !p.Fits {
		t.Fatalf("family %s, tensor degree %d, fits %v", p.Family, p.TensorParallel, p.Fits)
	}
	shard := map[string]string{}
	for _, op := range p.Ops {
		shard[op.Name] = op.Shard
	}
	want := map[string]string{"qkv/MatMul": "column", "MatMul": "heads", "MatMul_1": "heads", "proj/MatMul": "row", "fc1/MatMul": "column", "fc2/MatMul": "row"}
	for b := 0; b < 12; b++ {
		for op, w := range want {
			name := fmt.Sprintf("/blocks/blocks.%d/%s", b, op)
			if got := shard[name]; got != w {
				t.Errorf("%s: %q, want %q", name, got, w)
			}
			if got := shard[name+"/grad"]; got != "grad:"+w {
				t.Errorf("%s/grad: %q, want grad:%s", name, got, w)
			}
		}
	}
	syncs := 0
	for _, a := range p.AllReduces {
		if a.Tensor != "" {
			syncs++
			if len(a.Devices) != p.TensorParallel {
				t.Errorf("sync on %s over %v, want the group of %d", a.Tensor, a.Devices, p.TensorParallel)
			}
		}
	}
	// At least one forward and one backward collective per block.
	if syncs < 2*12 {
		t.Errorf("%d tensor-parallel collectives, want at least two per block", syncs)
	}
	st := p.Stages[0]
	if st.TensorParallel != p.TensorParallel || st.TensorSyncMS <= 0 {
		t.Errorf("stage: tensor %d, sync %g ms", st.TensorParallel, st.TensorSyncMS)
	}
	peak := map[string]int64{}
	for _, d := range p.Devices {
		peak[d.Name] = d.PeakMemoryBytes
	}
	if len(st.Devices) != p.TensorParallel*st.Replicas {
		t.Errorf("stage devices %v: want %d groups of %d", st.Devices, st.Replicas, p.TensorParallel)
	}
	for _, d := range st.Devices {
		if peak[d] != peak[st.Devices[0]] || peak[d] == 0 {
			t.Errorf("%s peaks at %d bytes, %s at %d: members mirror the first", d, peak[d], st.Devices[0], peak[st.Devices[0]])
		}
	}
	// Deterministic: the same plan byte for byte.
	if _, again, _ := invoke(t, append(args, "--strategy", "tensor")...); again != stdout {
		t.Error("a second run gave another plan")
	}
	// The report tells the group's collectives from the replicas'
	// buckets and says where each member sits.
	dir := t.TempDir()
	planFile, html := filepath.Join(dir, "plan.json"), filepath.Join(dir, "report.html")
	if err := os.WriteFile(planFile, []byte(stdout), 0o644); err != nil {
		t.Fatal(err)
	}
	if code, _, stderr := invoke(t, "report", planFile, "-o", html); code != 0 {
		t.Fatalf("report: exit %d: %s", code, stderr)
	}
	page, err := os.ReadFile(html)
	if err != nil {
		t.Fatal(err)
	}
	for _, w := range []string{"Tensor-parallel", fmt.Sprintf("in groups of %d", p.TensorParallel), "group 0, member 1", fmt.Sprintf("× tensor %d", p.TensorParallel)} {
		if !strings.Contains(string(page), w) {
			t.Errorf("report lacks %q", w)
		}
	}
	code, stdout, stderr = invoke(t, args...)
	if code != 0 {
		t.Fatalf("auto: exit %d: %s", code, stderr)
	}
	var auto plan.Plan
	if err := json.Unmarshal([]byte(stdout), &auto); err != nil {
		t.Fatal(err)
	}
	if auto.Family != "tensor" {
		var rows []string
		for _, c := range auto.Candidates {
			rows = append(rows, fmt.Sprintf("%s %g", c.Strategy, c.PredictedStepMS))
		}
		t.Errorf("auto chose %s (%g ms); candidates: %s", auto.Strategy, auto.PredictedStepMS, strings.Join(rows, ", "))
	}
}

// TestTensorPlanGiven: a tensor-parallel plan file re-scores to the
// same step (its split solved again and checked against the ops'
// shards), and a file whose shards were edited is refused, naming the
// op.
func TestTensorPlanGiven(t *testing.T) {
	// One group of two and no replicas (batch 1 on three V100s): the
	// plan's one stage is its tensor-parallel group. This was read as a
	// placement on one device, 91.6 ms against the plan's 53.3.
	t.Run("one group", func(t *testing.T) {
		out := filepath.Join(t.TempDir(), "plan.json")
		args := []string{"plan", filepath.Join(modelDir, "gpt2_small.onnx"), "--batch", "1",
			"--cluster", filepath.Join(clusterDir, "3xV100.yaml"), "-o", "json"}
		code, stdout, stderr := invoke(t, append(args, "--strategy", "tensor", "--tensor-parallel", "2", "--out", out)...)
		if code != 0 {
			t.Fatalf("exit %d: %s", code, stderr)
		}
		var first, again plan.Plan
		if err := json.Unmarshal([]byte(stdout), &first); err != nil {
			t.Fatal(err)
		}
		if len(first.Stages) != 1 || first.Stages[0].Replicas > 1 || first.Stages[0].TensorParallel != 2 {
			t.Fatalf("want one stage, one group of 2: %+v", first.Stages)
		}
		code, stdout, stderr = invoke(t, append(args, "--placement", out)...)
		if code != 0 {
			t.Fatalf("re-score: exit %d: %s", code, stderr)
		}
		if err := json.Unmarshal([]byte(stdout), &again); err != nil {
			t.Fatal(err)
		}
		if again.Family != "tensor" || again.PredictedStepMS != first.PredictedStepMS {
			t.Errorf("re-scored: family %s, step %g ms; the plan: step %g ms", again.Family, again.PredictedStepMS, first.PredictedStepMS)
		}
	})
	dir := t.TempDir()
	out := filepath.Join(dir, "plan.json")
	args := []string{"plan", filepath.Join(modelDir, "gpt2_small.onnx"), "--batch", "8",
		"--cluster", filepath.Join(clusterDir, "8xA100-2host.yaml"), "-o", "json"}
	if code, _, stderr := invoke(t, append(args, "--strategy", "tensor", "--out", out)...); code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	raw, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	var first plan.Plan
	if err := json.Unmarshal(raw, &first); err != nil {
		t.Fatal(err)
	}
	code, stdout, stderr := invoke(t, append(args, "--placement", out)...)
	if code != 0 {
		t.Fatalf("re-score: exit %d: %s", code, stderr)
	}
	var again plan.Plan
	if err := json.Unmarshal([]byte(stdout), &again); err != nil {
		t.Fatal(err)
	}
	if again.Family != "tensor" || again.TensorParallel != first.TensorParallel || again.PredictedStepMS != first.PredictedStepMS {
		t.Errorf("re-scored: family %s, degree %d, step %g ms; the plan: degree %d, step %g ms", again.Family, again.TensorParallel, again.PredictedStepMS, first.TensorParallel, first.PredictedStepMS)
	}
	edited := strings.Replace(string(raw), `"shard": "row"`, `"shard": "column"`, 1)
	if edited == string(raw) {
		t.Fatal("the plan has no row-split op to edit")
	}
	bad := filepath.Join(dir, "edited.json")
	if err := os.WriteFile(bad, []byte(edited), 0o644); err != nil {
		t.Fatal(err)
	}
	code, _, stderr = invoke(t, append(args, "--placement", bad)...)
	if code != 2 || !strings.Contains(stderr, `is split "column"`) || !strings.Contains(stderr, "edited.json") {
		t.Errorf("edited shards: exit %d: %s", code, stderr)
	}
}

// TestTensorParallelFlag: --tensor-parallel fixes the group size, none
// turns the family off, and a size below 2 is a usage error.
func TestTensorParallelFlag(t *testing.T) {
	args := []string{"plan", filepath.Join(modelDir, "bert_base.onnx"), "--batch", "16",
		"--cluster", filepath.Join(clusterDir, "4xV100.yaml"), "-o", "json", "--strategy", "tensor"}
	code, stdout, stderr := invoke(t, append(args, "--tensor-parallel", "4")...)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	var p plan.Plan
	if err := json.Unmarshal([]byte(stdout), &p); err != nil {
		t.Fatal(err)
	}
	if p.TensorParallel != 4 {
		t.Errorf("tensor degree %d, want 4", p.TensorParallel)
	}
	if code, _, stderr := invoke(t, append(args, "--tensor-parallel", "none")...); code == 0 || !strings.Contains(stderr, "turned off") {
		t.Errorf("none: exit %d: %s", code, stderr)
	}
	if code, _, stderr := invoke(t, append(args, "--tensor-parallel", "1")...); code != 2 || !strings.Contains(stderr, "--tensor-parallel") {
		t.Errorf("1: exit %d: %s", code, stderr)
	}
}

// TestTensorParallelUnderRules: under an avoid rule the groups are made
// of devices every op may run on, and the rule holds; a pin to one
// device leaves no such group.
func TestTensorParallelUnderRules(t *testing.T) {
	args := []string{"plan", filepath.Join(modelDir, "gpt2_small.onnx"), "--batch", "8",
		"--cluster", filepath.Join(clusterDir, "8xA100-2host.yaml"), "-o", "json", "--strategy", "tensor"}
	code, stdout, stderr := invoke(t, append(args, "--avoid", "name:*=n1gpu3")...)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	var p plan.Plan
	if err := json.Unmarshal([]byte(stdout), &p); err != nil {
		t.Fatal(err)
	}
	if p.TensorParallel < 2 {
		t.Errorf("tensor degree %d under an avoid rule", p.TensorParallel)
	}
	for _, st := range p.Stages {
		for _, d := range st.Devices {
			if d == "n1gpu3" {
				t.Errorf("stage %d uses n1gpu3, which the rule avoids", st.Index)
			}
		}
	}
	if code, _, stderr := invoke(t, append(args, "--pin", "module:/tok=n0gpu0")...); code == 0 || !strings.Contains(stderr, "devices every op may run on") {
		t.Errorf("pinned: exit %d: %s", code, stderr)
	}
}
