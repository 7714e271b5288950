package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/opplace/opplace/cluster"
	"github.com/opplace/opplace/plan"
	"github.com/opplace/opplace/profile"
)

const profileDir = "../../testdata/profiles"

// Measure a tiny-input ResNet-50 on this CPU, write its cluster, and plan
// with the measured times.
func TestProfileMeasureAndPlan(t *testing.T) {
	dir := t.TempDir()
	prof, cl := filepath.Join(dir, "p.json"), filepath.Join(dir, "cpu.yaml")
	model := filepath.Join(modelDir, "resnet50.onnx")
	shape := []string{"--shape", "input.1=1,3,32,32"}
	code, stdout, stderr := invoke(t, append([]string{"profile", model, "--runtime", "gorgonia", "--runs", "3", "--warmup", "1", "--out", prof, "--cluster-out", cl, "--report"}, shape...)...)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	for _, want := range []string{"measured 42 of 42 distinct ops", "calibration on 42 distinct ops", "roofline", "calibrated", "whole graph on one local-cpu"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("summary lacks %q:\n%s", want, stdout)
		}
	}
	p, err := profile.Load(prof)
	if err != nil {
		t.Fatal(err)
	}
	// Every kernel of ResNet-50 (169 ops less 47 Identity and a Flatten,
	// view ops) is measured.
	if len(p.Ops) != 121 || p.DeviceType("local-cpu") == nil || p.DeviceType("local-cpu").Calibration == nil {
		t.Errorf("%d measurements, device types %+v", len(p.Ops), p.DeviceTypes)
	}
	c, err := cluster.Load(cl)
	if err != nil {
		t.Fatalf("cluster-out: %v", err)
	}
	if c.Devices[0].Type.Name != "local-cpu" {
		t.Errorf("cluster device type %q", c.Devices[0].Type.Name)
	}
	code, stdout, stderr = invoke(t, append([]string{"plan", model, "--cluster", cl, "--profile", prof, "--mode", "infer", "--fusion", "none"}, shape...)...)
	if code != 0 {
		t.Fatalf("plan exit %d: %s", code, stderr)
	}
	var pl plan.Plan
	if err := json.Unmarshal([]byte(stdout), &pl); err != nil {
		t.Fatal(err)
	}
	// One device, no fusion: the step is the sum of the op times, which
	// are the measured medians (view ops cost nothing).
	var sum float64
	for _, m := range p.Ops {
		sum += m.MedianMS
	}
	if d := pl.PredictedStepMS - sum; d > 1e-3*sum || d < -1e-3*sum {
		t.Errorf("predicted step %.4f ms, want the measured sum %.4f ms", pl.PredictedStepMS, sum)
	}
}

// Import the shipped ONNX Runtime sample for the hetero cluster's CPU and
// plan with it.
func TestProfileImportAndPlan(t *testing.T) {
	dir := t.TempDir()
	prof := filepath.Join(dir, "ort.json")
	model := filepath.Join(modelDir, "resnet50.onnx")
	hetero := filepath.Join(clusterDir, "hetero.yaml")
	shape := []string{"--shape", "input.1=1,3,224,224"}
	code, stdout, stderr := invoke(t, append([]string{"profile", model, "--import", filepath.Join(profileDir, "resnet50_b1_onnxruntime_cpu.json"),
		"--device-type", "Workstation-CPU", "--cluster", hetero, "--out", prof}, shape...)...)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	for _, want := range []string{"onnxruntime", "366 matched 122 ops", "unmatched node names (1): ReorderOutput_token_0"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("summary lacks %q:\n%s", want, stdout)
		}
	}
	plain := append([]string{"plan", model, "--cluster", hetero, "--mode", "infer", "--strategy", "single"}, shape...)
	code, a, stderr := invoke(t, plain...)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	code, b, stderr := invoke(t, append(plain, "--profile", prof)...)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	// single places everything on the fastest device (the A100): the CPU
	// profile must not change that placement or its step (the lower
	// bound, taken over every device type, may move).
	var pa, pb plan.Plan
	if err := json.Unmarshal([]byte(a), &pa); err != nil {
		t.Fatal(err)
	}
	if err := json.Unmarshal([]byte(b), &pb); err != nil {
		t.Fatal(err)
	}
	if pa.PredictedStepMS != pb.PredictedStepMS || pa.Ops[0].Device != "a100" || pb.Ops[0].Device != "a100" {
		t.Errorf("steps %v and %v ms, devices %s and %s", pa.PredictedStepMS, pb.PredictedStepMS, pa.Ops[0].Device, pb.Ops[0].Device)
	}
	// On the CPU alone the profile is what the plan charges.
	cpuOnly := filepath.Join(dir, "cpu.yaml")
	if err := os.WriteFile(cpuOnly, []byte(`name: cpu
device_types:
  - {name: Workstation-CPU, base: CPU, peak_flops: {float32: 1T}, memory_bandwidth: 140.8GB/s, launch_overhead: 1us, memory: 128GiB}
hosts: [{name: h, intra: {kind: pcie, bandwidth: 12GB/s, latency: 10us}}]
devices: [{name: cpu0, type: Workstation-CPU, host: h}]
`), 0o644); err != nil {
		t.Fatal(err)
	}
	code, c, stderr := invoke(t, append([]string{"plan", model, "--cluster", cpuOnly, "--mode", "infer", "--fusion", "none", "--profile", prof}, shape...)...)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	p, err := profile.Load(prof)
	if err != nil {
		t.Fatal(err)
	}
	var sum float64
	for _, m := range p.Ops {
		sum += m.MedianMS
	}
	var pc plan.Plan
	if err := json.Unmarshal([]byte(c), &pc); err != nil {
		t.Fatal(err)
	}
	if d := pc.PredictedStepMS - sum; d > 1e-3*sum || d < -1e-3*sum {
		t.Errorf("CPU step %.4f ms, want the measured sum %.4f ms", pc.PredictedStepMS, sum)
	}
}

// A real ONNX Runtime trace with the optimized model its session wrote:
// every kernel maps, and the summary says so.
func TestProfileImportOptimized(t *testing.T) {
	model := filepath.Join(modelDir, "resnet50.onnx")
	base := []string{"profile", model, "--shape", "input.1=1,3,224,224", "--import", filepath.Join(profileDir, "resnet50_b1_ort130_cpu.json"),
		"--device-type", "Workstation-CPU", "--cluster", filepath.Join(clusterDir, "hetero.yaml"), "--out", filepath.Join(t.TempDir(), "p.json")}
	code, stdout, stderr := invoke(t, append(base, "--optimized-model", filepath.Join(profileDir, "resnet50_b1_ort130_cpu.opt.onnx"))...)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	for _, want := range []string{"232 matched 122 ops; 0 ops have no time", "matched 100.0% of the trace's kernel time (61.862 of 61.862 ms per run over 4 runs"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("summary lacks %q:\n%s", want, stdout)
		}
	}
	if strings.Contains(stderr, "warning") {
		t.Errorf("warnings: %s", stderr)
	}
	// By name only it says the optimized model would map more.
	code, _, stderr = invoke(t, base...)
	if code != 0 || !strings.Contains(stderr, "warning: ONNX Runtime kernels mapped by name only") || !strings.Contains(stderr, "--optimized-model") {
		t.Errorf("exit %d, stderr %s", code, stderr)
	}
	for _, tc := range []struct{ opt, want string }{
		{filepath.Join(profileDir, "resnet50_b1_ort130_cpu.json"), "resnet50_b1_ort130_cpu.json: not an ONNX model"},
		{filepath.Join(profileDir, "bert_base_b1_ort130_cpu.opt.onnx"), "bert_base_b1_ort130_cpu.opt.onnx: shares no tensor name with the model"},
		{filepath.Join(profileDir, "missing.opt.onnx"), "missing.opt.onnx: cannot read the optimized model"},
	} {
		code, _, stderr := invoke(t, append(base, "--optimized-model", tc.opt)...)
		if code != exitInvalid || !strings.Contains(stderr, tc.want) {
			t.Errorf("exit %d, stderr %q; want 2 and %q", code, stderr, tc.want)
		}
	}
}

func TestProfileErrors(t *testing.T) {
	dir := t.TempDir()
	bad := filepath.Join(dir, "bad.json")
	if err := os.WriteFile(bad, []byte(`{"format": "nope"}`), 0o644); err != nil {
		t.Fatal(err)
	}
	model := filepath.Join(modelDir, "vgg16.onnx")
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"gpu", []string{"profile", model, "--device", "gpu"}, "only cpu"},
		{"import without type", []string{"profile", model, "--import", bad}, "--device-type"},
		{"optimized without import", []string{"profile", model, "--optimized-model", bad}, "needs --import"},
		{"unknown type", []string{"profile", model, "--import", bad, "--device-type", "Abacus"}, "no preset"},
		{"bad trace", []string{"profile", model, "--import", bad, "--device-type", "V100-16GB"}, "bad.json"},
		{"bad profile for plan", []string{"plan", model, "--cluster", filepath.Join(clusterDir, "4xV100.yaml"), "--profile", bad}, "bad.json"},
		{"bad fusion", []string{"plan", model, "--cluster", filepath.Join(clusterDir, "4xV100.yaml"), "--fusion", "diagonal"}, "unknown fusion mode"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, _, stderr := invoke(t, tc.args...)
			if code != exitInvalid || !strings.Contains(stderr, tc.want) {
				t.Errorf("exit %d, stderr %q; want 2 and %q", code, stderr, tc.want)
			}
		})
	}
}

// Fusion changes what placement sees, never which ops the plan lists;
// the DOT draws fused groups as clusters.
func TestPlanFusionFlag(t *testing.T) {
	dir := t.TempDir()
	model := filepath.Join(modelDir, "resnet50.onnx")
	cl := filepath.Join(clusterDir, "4xV100.yaml")
	var steps []float64
	for _, mode := range []string{"none", "vertical", "horizontal", "hybrid"} {
		dot := filepath.Join(dir, mode+".dot")
		code, stdout, stderr := invoke(t, "plan", model, "--cluster", cl, "--mode", "infer", "--fusion", mode, "--dot", dot, "--dot-detail", "op", "-v")
		if code != 0 {
			t.Fatalf("%s: exit %d: %s", mode, code, stderr)
		}
		var p plan.Plan
		if err := json.Unmarshal([]byte(stdout), &p); err != nil {
			t.Fatal(err)
		}
		if len(p.Ops) != 169 {
			t.Errorf("%s: %d ops listed, want 169", mode, len(p.Ops))
		}
		steps = append(steps, p.PredictedStepMS)
		data, err := os.ReadFile(dot)
		if err != nil {
			t.Fatal(err)
		}
		clusters := strings.Count(string(data), "cluster_fused_")
		switch mode {
		case "none":
			if clusters != 0 || strings.Contains(stderr, "fusion none:") == false {
				t.Errorf("none: %d fused clusters, stderr %q", clusters, stderr)
			}
		case "hybrid":
			if !strings.Contains(stderr, "fusion hybrid: 169 ops -> 60, vertical merged 108, horizontal merged 1") || clusters == 0 {
				t.Errorf("hybrid: %d fused clusters, stderr %q", clusters, stderr)
			}
		}
	}
	if steps[3] >= steps[0] {
		t.Errorf("hybrid fusion step %.3f ms not below unfused %.3f ms", steps[3], steps[0])
	}
}
