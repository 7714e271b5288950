package main

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/opplace/opplace/profile"
)

// profile --from A --from B pools two models' profiles: every measurement
// kept, one calibration over both, --holdout prices a third model.
func TestProfilePooled(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "pooled.json")
	resnet := filepath.Join(profileDir, "resnet50_b1_gorgonia_cpu.json")
	gpt2 := filepath.Join(profileDir, "gpt2_small_b1_gorgonia_cpu.json")
	bert := filepath.Join(profileDir, "bert_base_b1_gorgonia_cpu.json")
	code, stdout, stderr := invoke(t, "profile", "--from", resnet, "--from", gpt2, "--holdout", bert, "--report", "--out", out)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	for _, want := range []string{"calibrated local-cpu on", "of 2 model(s)", "calibrated on 2 model(s): resnet50.onnx, gpt2_small.onnx",
		"conv", "matmul", "held out " + bert, "whole model: measured"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("report lacks %q:\n%s", want, stdout)
		}
	}
	p, err := profile.Load(out)
	if err != nil {
		t.Fatal(err)
	}
	a, _ := profile.Load(resnet)
	b, _ := profile.Load(gpt2)
	c := p.DeviceType("local-cpu").Calibration
	if len(p.Ops) != len(a.Ops)+len(b.Ops) || c == nil || c.Method != profile.MethodShape || len(c.Models) != 2 {
		t.Errorf("pooled profile: %d ops (want %d), calibration %+v", len(p.Ops), len(a.Ops)+len(b.Ops), c)
	}
	var raw map[string]any
	data, _ := os.ReadFile(out)
	if json.Unmarshal(data, &raw) != nil || raw["model"] != nil {
		t.Errorf("pooled profile names a model: %v", raw["model"])
	}
}

func TestProfilePooledErrors(t *testing.T) {
	dir := t.TempDir()
	old := filepath.Join(dir, "old.json")
	// A profile from before features: pooling it says how to refit it.
	if err := os.WriteFile(old, []byte(`{"format": "opplace-profile/1", "model": "m.onnx", "source": "gorgonia",
 "device_types": [{"name": "local-cpu", "peak_flops": 1e10, "memory_bandwidth": 1e10, "launch_overhead_s": 1e-6}],
 "ops": [{"name": "relu", "key": "", "type": "Relu", "device_type": "local-cpu", "median_ms": 1, "p10_ms": 1, "p90_ms": 1, "runs": 3}]}`), 0o644); err != nil {
		t.Fatal(err)
	}
	resnet := filepath.Join(profileDir, "resnet50_b1_gorgonia_cpu.json")
	for _, tc := range []struct {
		name string
		args []string
		want string
	}{
		{"no model, no from", []string{"profile"}, "--from FILE"},
		{"old profile", []string{"profile", "--from", resnet, "--from", old}, "m.onnx: 1 measurements"},
		{"holdout without from", []string{"profile", filepath.Join(modelDir, "vgg16.onnx"), "--holdout", resnet}, "--holdout"},
		{"no such type", []string{"profile", "--from", resnet, "--from", resnet, "--device-type", "gpu"}, "--device-type"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			code, _, stderr := invoke(t, append(tc.args, "--out", filepath.Join(dir, "x.json"))...)
			if code != exitInvalid || !strings.Contains(stderr, tc.want) {
				t.Errorf("exit %d, stderr %q; want 2 and %q", code, stderr, tc.want)
			}
		})
	}
}

// One trace imported at 1 and 2 threads (the 2-thread times halved by
// hand), pooled: plan --profile prices the CPU with the entry of the
// cluster type's threads:, and warns when it has none.
func TestProfileThreadsPlan(t *testing.T) {
	dir := t.TempDir()
	model := filepath.Join(modelDir, "resnet50.onnx")
	shape := []string{"--shape", "input.1=1,3,224,224"}
	hetero := filepath.Join(clusterDir, "hetero.yaml")
	var files []string
	for _, th := range []string{"1", "2"} {
		out := filepath.Join(dir, "t"+th+".json")
		code, _, stderr := invoke(t, append([]string{"profile", model, "--import", filepath.Join(profileDir, "resnet50_b1_onnxruntime_cpu.json"),
			"--device-type", "Workstation-CPU", "--cluster", hetero, "--threads", th, "--out", out}, shape...)...)
		if code != 0 {
			t.Fatalf("exit %d: %s", code, stderr)
		}
		if th == "2" {
			p, err := profile.Load(out)
			if err != nil {
				t.Fatal(err)
			}
			for i := range p.Ops {
				p.Ops[i].MedianMS /= 2
			}
			f, _ := os.Create(out)
			if err := p.Write(f); err != nil {
				t.Fatal(err)
			}
			f.Close()
		}
		files = append(files, out)
	}
	pooled := filepath.Join(dir, "pooled.json")
	code, stdout, stderr := invoke(t, "profile", "--from", files[0], "--from", files[1], "--out", pooled)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	for _, want := range []string{"calibrated Workstation-CPU@1t", "calibrated Workstation-CPU@2t"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("summary lacks %q:\n%s", want, stdout)
		}
	}
	step := func(threads string) (float64, string) {
		cl := filepath.Join(dir, "cpu"+threads+".yaml")
		if err := os.WriteFile(cl, []byte(`name: cpu
device_types:
  - {name: Workstation-CPU, base: CPU, peak_flops: {float32: 1T}, memory_bandwidth: 140.8GB/s, launch_overhead: 1us, memory: 128GiB, threads: `+threads+`}
hosts: [{name: h, intra: {kind: pcie, bandwidth: 12GB/s, latency: 10us}}]
devices: [{name: cpu0, type: Workstation-CPU, host: h}]
`), 0o644); err != nil {
			t.Fatal(err)
		}
		code, out, stderr := invoke(t, append([]string{"plan", model, "--cluster", cl, "--mode", "infer", "--fusion", "none", "--profile", pooled}, shape...)...)
		if code != 0 {
			t.Fatalf("threads %s: exit %d: %s", threads, code, stderr)
		}
		var p struct {
			PredictedStepMS float64 `json:"predicted_step_ms"`
		}
		if err := json.Unmarshal([]byte(out), &p); err != nil {
			t.Fatal(err)
		}
		return p.PredictedStepMS, stderr
	}
	one, w1 := step("1")
	two, w2 := step("2")
	four, w4 := step("4")
	if r := one / two; r < 1.99 || r > 2.01 {
		t.Errorf("1-thread step %.3f ms, 2-thread %.3f ms: want twice", one, two)
	}
	if four != two || !strings.Contains(w4, "runs 4 threads") || strings.Contains(w1+w2, "threads") {
		t.Errorf("4 threads: step %.3f ms, warnings %q (1: %q, 2: %q)", four, w4, w1, w2)
	}
}

// A profile written before features names its model: pooling refits it
// from that model at the profile's batch.
func TestProfilePooledRefitsOld(t *testing.T) {
	dir := t.TempDir()
	p, err := profile.Load(filepath.Join(profileDir, "bert_base_b1_gorgonia_cpu.json"))
	if err != nil {
		t.Fatal(err)
	}
	p.Model = filepath.Join(modelDir, "bert_base.onnx")
	for i := range p.Ops {
		p.Ops[i].FLOPs, p.Ops[i].Bytes, p.Ops[i].WorkingSet = 0, 0, 0
	}
	old := filepath.Join(dir, "old.json")
	f, _ := os.Create(old)
	if err := p.Write(f); err != nil {
		t.Fatal(err)
	}
	f.Close()
	code, stdout, stderr := invoke(t, "profile", "--from", filepath.Join(profileDir, "resnet50_b1_gorgonia_cpu.json"), "--from", old, "--out", filepath.Join(dir, "pooled.json"))
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	if want := fmt.Sprintf("profile without op features; %d measurements refitted from the model", len(p.Ops)); !strings.Contains(stdout, want) {
		t.Errorf("summary lacks %q:\n%s", want, stdout)
	}
}
