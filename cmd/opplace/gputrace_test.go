package main

import (
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/opplace/opplace/internal/kinetotest"
	"github.com/opplace/opplace/onnx"
	"github.com/opplace/opplace/plan"
	"github.com/opplace/opplace/profile"
	"github.com/opplace/opplace/train"
)

// A GPU calibrated end to end from a training step's trace, as
// docs/profiling-and-fusion.md tells a user with a GPU to do: opplace
// profile MODEL --import TRACE --device-type A100-80GB, then plan
// --profile on one A100. The trace is built in Kineto's format
// (internal/kinetotest) with kernel times from known constants: no GPU
// was at hand to record one.
func TestGPUTraceCalibrateAndPlan(t *testing.T) {
	dir := t.TempDir()
	model := filepath.Join(modelDir, "heldout", "resnet18.onnx")
	shape := []string{"--shape", "input.1=16,3,224,224"}
	m, err := onnx.Load(model, onnx.Options{Shapes: map[string][]int64{"input.1": {16, 3, 224, 224}}})
	if err != nil {
		t.Fatal(err)
	}
	tg, _, err := train.Build(m.Graph, train.Options{Optimizer: train.Adam})
	if err != nil {
		t.Fatal(err)
	}
	known := kinetotest.Constants{PeakFLOPS: 19.5e12, Bandwidth: 2039e9, ComputeEff: 0.45, ComputeHalf: 2e9,
		ComputeOverhead: 5e-6, MemoryEff: 0.72, MemoryOverhead: 4e-6}
	tr, err := kinetotest.TrainingStep(m.Graph, tg, known, 2)
	if err != nil {
		t.Fatal(err)
	}
	trace, prof, cl := filepath.Join(dir, "trace.json"), filepath.Join(dir, "gpu.json"), filepath.Join(dir, "a100.yaml")
	if err := os.WriteFile(trace, tr.JSON, 0o644); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(cl, []byte("name: 1xA100\nhosts:\n  - {name: node0, intra: {preset: pcie4}}\ndevices:\n  - {name: gpu0, type: A100-80GB, host: node0}\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	code, stdout, stderr := invoke(t, append([]string{"profile", model, "--import", trace, "--device-type", "A100-80GB", "--out", prof}, shape...)...)
	if code != 0 {
		t.Fatalf("profile exit %d: %s", code, stderr)
	}
	for _, want := range []string{"training step (adam): GPU kernel time forward", "backward", "optimizer", "calibration on"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("summary lacks %q:\n%s", want, stdout)
		}
	}
	p, err := profile.Load(prof)
	if err != nil {
		t.Fatal(err)
	}
	dt := p.DeviceType("A100-80GB")
	if dt == nil || dt.Calibration == nil || dt.Calibration.Trace != trace {
		t.Fatalf("device type %+v: want A100-80GB calibrated from %s", dt, trace)
	}
	if f := dt.Calibration.Fit(profile.FamilyConv); math.Abs(f.ComputeEfficiency/known.ComputeEff-1) > 0.01 || math.Abs(f.ComputeHalfFLOPs/known.ComputeHalf-1) > 0.01 {
		t.Errorf("conv fit e_max %.4g, W_half %.4g; the trace was made with %.4g, %.4g", f.ComputeEfficiency, f.ComputeHalfFLOPs, known.ComputeEff, known.ComputeHalf)
	}
	// The model's ops of the traced step, as the trace timed them.
	traced := (tr.StepUS - tr.LossUS) / 1e3
	for _, tc := range []struct {
		name string
		keep func(*profile.Profile)
		tol  float64
	}{
		// Every op of the step has its measured time: the one-device
		// step is their sum (to the profile's 1 ns rounding).
		{"measured", func(*profile.Profile) {}, 1e-4},
		// Only the fitted constants: the step from them alone.
		{"constants only", func(p *profile.Profile) { p.Ops = nil }, 0.01},
	} {
		t.Run(tc.name, func(t *testing.T) {
			q, err := profile.Load(prof)
			if err != nil {
				t.Fatal(err)
			}
			tc.keep(q)
			path := filepath.Join(dir, strings.ReplaceAll(tc.name, " ", "_")+".json")
			f, err := os.Create(path)
			if err != nil {
				t.Fatal(err)
			}
			if err := q.Write(f); err != nil {
				t.Fatal(err)
			}
			f.Close()
			code, stdout, stderr := invoke(t, append([]string{"plan", model, "--cluster", cl, "--profile", path, "--fusion", "none", "--optimizer", "adam"}, shape...)...)
			if code != 0 {
				t.Fatalf("plan exit %d: %s", code, stderr)
			}
			var pl plan.Plan
			if err := json.Unmarshal([]byte(stdout), &pl); err != nil {
				t.Fatal(err)
			}
			t.Logf("predicted step %.4f ms, traced %.4f ms (%+.3f%%)", pl.PredictedStepMS, traced, 100*(pl.PredictedStepMS/traced-1))
			if math.Abs(pl.PredictedStepMS/traced-1) > tc.tol {
				t.Errorf("predicted step %.4f ms, the trace's %.4f ms (tolerance %.2f%%)", pl.PredictedStepMS, traced, 100*tc.tol)
			}
			note := false
			for _, w := range pl.Warnings {
				note = note || strings.Contains(w, "device type A100-80GB is priced from trace "+trace)
			}
			if !note {
				t.Errorf("the plan does not say its constants came from the trace: %q", pl.Warnings)
			}
		})
	}
}
