package main

import (
	"encoding/json"
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
