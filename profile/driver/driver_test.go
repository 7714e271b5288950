package driver

import (
	"context"
	"errors"
	"strings"
	"testing"

	"github.com/opplace/opplace/cluster"
	"github.com/opplace/opplace/internal/importopt"
	"github.com/opplace/opplace/pipeline"
)

const (
	resnet   = "../../testdata/models/resnet50.onnx"
	profiles = "../../testdata/profiles/"
)

var resnetB1 = importopt.Options{Shapes: map[string][]int64{"input.1": {1, 3, 224, 224}}}

// TestRun re-reads and imports profiles through the driver: each way
// yields a calibrated profile of the device type asked for, and the
// report's whole-graph check simulates the three cost models.
func TestRun(t *testing.T) {
	cpu, ok := cluster.Preset("CPU")
	if !ok {
		t.Fatal("no CPU preset")
	}
	for _, tc := range []struct {
		name   string
		o      Options
		dtName string
	}{
		{"from a profile", Options{From: profiles + "resnet50_b1_gorgonia_cpu.json"}, "local-cpu"},
		{"an ONNX Runtime trace", Options{Trace: profiles + "resnet50_b1_ort130_cpu.json", Optimized: profiles + "resnet50_b1_ort130_cpu.opt.onnx",
			DeviceType: "CPU", TraceDevice: cpu}, "CPU"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := tc.o
			o.Model, o.Import, o.Report = resnet, resnetB1, true
			res, err := Run(context.Background(), o)
			if err != nil {
				t.Fatal(err)
			}
			if res.DeviceType != tc.dtName || res.Profile.DeviceType(tc.dtName) == nil {
				t.Fatalf("device type %q, want %q in the profile", res.DeviceType, tc.dtName)
			}
			if res.CalibrationErr != nil || res.Calibration == nil || res.Calibration.After.Samples == 0 {
				t.Fatalf("not calibrated: %v", res.CalibrationErr)
			}
			if got := res.Calibration.After.MedianRelErr; got >= res.Calibration.Before.MedianRelErr {
				t.Errorf("calibration did not lower the median error: %.3f -> %.3f", res.Calibration.Before.MedianRelErr, got)
			}
			r := res.Report
			if r == nil || len(r.Steps) != 3 || r.Measured == 0 || r.MeasuredMS <= 0 || len(r.Worst) == 0 {
				t.Fatalf("report %+v", r)
			}
			for _, s := range r.Steps {
				if s.Seconds <= 0 {
					t.Errorf("%s: step %g", s.Model, s.Seconds)
				}
			}
			if (tc.o.Trace != "") != (res.Imported != nil) || res.Profile.Model != resnet {
				t.Errorf("imported %v, model %q", res.Imported != nil, res.Profile.Model)
			}
		})
	}
}

// TestRunErrors: each failure comes back as the kind of error a caller
// tells apart.
func TestRunErrors(t *testing.T) {
	for _, tc := range []struct {
		name string
		o    Options
		kind func(error) bool
		msg  string
	}{
		{"a device type the profile lacks", Options{From: profiles + "resnet50_b1_gorgonia_cpu.json", DeviceType: "other"},
			func(err error) bool { var e *pipeline.InputError; return errors.As(err, &e) }, `has no device type "other"`},
		{"no ONNX Runtime library", Options{Runtime: RuntimeONNXRuntime, ORTLibrary: "/nonexistent/libonnxruntime.so"},
			func(err error) bool { var e *LibraryError; return errors.As(err, &e) }, "/nonexistent/libonnxruntime.so"},
		{"a trace without its device", Options{Trace: profiles + "resnet50_b1_ort130_cpu.json", DeviceType: "CPU"},
			func(err error) bool { return err != nil }, "no device type to price it with"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			o := tc.o
			o.Model, o.Import = resnet, resnetB1
			_, err := Run(context.Background(), o)
			if err == nil || !tc.kind(err) || !strings.Contains(err.Error(), tc.msg) {
				t.Errorf("got %v (%T), want one saying %q", err, err, tc.msg)
			}
		})
	}
}

// TestPool pools two models' profiles, prices a third held out, and
// reports a device type filter that matches nothing.
func TestPool(t *testing.T) {
	o := PoolOptions{From: []string{profiles + "resnet50_b1_gorgonia_cpu.json", profiles + "bert_base_b1_gorgonia_cpu.json"},
		Holdout: []string{profiles + "gpt2_small_b1_gorgonia_cpu.json"}}
	res, err := Pool(o)
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Calibrated) == 0 || res.Profile == nil {
		t.Fatal("nothing calibrated")
	}
	held := 0
	for _, c := range res.Calibrated {
		held += len(c.Holdouts)
		if got := len(c.Calibration.Models); got != 2 {
			t.Errorf("%s: calibrated on %d models, want 2", c.DeviceType.Name, got)
		}
		for _, h := range c.Holdouts {
			if h.Calibrated.Ops.Samples == 0 || h.Calibrated.MeasuredS <= 0 {
				t.Errorf("held out %s priced nothing", h.Path)
			}
		}
	}
	if held == 0 {
		t.Error("the held-out profile was priced on no device type")
	}
	o.DeviceType = "nope"
	var nm *NoMatchError
	if _, err := Pool(o); !errors.As(err, &nm) {
		t.Errorf("a filter matching nothing: %v", err)
	}
}
