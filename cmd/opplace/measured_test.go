package main

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"go.yaml.in/yaml/v3"

	"github.com/opplace/opplace/plan"
)

// publishedFile lists published single-GPU measurements of the shared
// models, split into a fitting and a held-out set
// (docs/model.md#predictions-against-published-measurements).
const publishedFile = "../../testdata/measured/published.yaml"

// Bounds on the median absolute error of the predicted step, held out and
// on the fitting set, a little above what the achievable-speed presets
// reach, so that a change which makes the predictions worse fails here.
// They reached 13.7% and 1.2% when these were set; 16.1% and 3.4% since
// the training step holds only the activations autograd saves
// (train/saved.go): the two held-out A100 training cases lost the
// over-counted backward traffic that had stood in for the batch norms the
// BN-folded ResNet-50 lacks. The 15% target is missed by that.
const (
	heldOutMedianLimit = 0.17
	fitMedianLimit     = 0.05
)

type publishedCase struct {
	Name          string  `yaml:"name"`
	Set           string  `yaml:"set"`
	DispatchBound bool    `yaml:"dispatch_bound"`
	Model         string  `yaml:"model"`
	Input         string  `yaml:"input"`
	Shape         []int64 `yaml:"shape"`
	Batch         int     `yaml:"batch"`
	Device        string  `yaml:"device"`
	Mode          string  `yaml:"mode"`
	Precision     string  `yaml:"precision"`
	Optimizer     string  `yaml:"optimizer"`
	SamplesPerS   float64 `yaml:"samples_per_s"`
	Source        string  `yaml:"source"`
}

// flatEfficiency is the cost model before the achievable-speed presets: a
// flat 70% of every compute peak and 80% of bandwidth, no ramp, the
// datasheet clock.
const flatEfficiency = "{compute: 0.7, tensor: 0.7, tensor_conv: 0.7, memory: 0.8, clock: 1, matmul_half: 0}"

// readCases reads the cases of a measurements file
// (testdata/measured/*.yaml).
func readCases[C any](t *testing.T, path string) []C {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var file struct {
		Cases []C `yaml:"cases"`
	}
	if err := yaml.Unmarshal(data, &file); err != nil {
		t.Fatal(err)
	}
	if len(file.Cases) == 0 {
		t.Fatalf("%s: no cases", path)
	}
	return file.Cases
}

// oneDevice writes a cluster file of one device of the device type into
// dir; efficiency, when set, overrides the preset's achievable-speed model.
func oneDevice(t *testing.T, dir, deviceType, efficiency string) string {
	t.Helper()
	src := fmt.Sprintf("devices:\n  - {name: gpu0, type: %s}\n", deviceType)
	if efficiency != "" {
		src = fmt.Sprintf("device_types:\n  - name: %s\n    efficiency: %s\n", deviceType, efficiency) + src
	}
	cl := filepath.Join(dir, "one.yaml")
	if err := os.WriteFile(cl, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	return cl
}

// predictStep plans one case on a single device of its type and returns
// the predicted step in ms; efficiency, when set, overrides the preset's
// achievable-speed model.
func predictStep(t *testing.T, c publishedCase, efficiency string) float64 {
	t.Helper()
	cl := oneDevice(t, t.TempDir(), c.Device, efficiency)
	dims := make([]string, len(c.Shape))
	for i, d := range c.Shape {
		dims[i] = fmt.Sprint(d)
	}
	args := []string{"plan", filepath.Join(modelDir, c.Model+".onnx"), "--cluster", cl, "--strategy", "single",
		"--mode", c.Mode, "--fusion", "none", "--shape", c.Input + "=" + strings.Join(dims, ","), "-o", "json"}
	if c.Precision != "fp32" {
		args = append(args, "--precision", c.Precision)
	}
	if c.Optimizer != "" {
		args = append(args, "--optimizer", c.Optimizer)
	}
	code, stdout, stderr := invoke(t, args...)
	if code != 0 {
		t.Fatalf("%s: exit %d: %s", c.Name, code, stderr)
	}
	var p plan.Plan
	if err := json.Unmarshal([]byte(stdout), &p); err != nil {
		t.Fatalf("%s: plan is not JSON: %v", c.Name, err)
	}
	return p.PredictedStepMS
}

func median(xs []float64) float64 {
	s := slices.Clone(xs)
	slices.Sort(s)
	n := len(s)
	if n%2 == 1 {
		return s[n/2]
	}
	return (s[n/2-1] + s[n/2]) / 2
}

// TestPublishedMeasurements predicts every published case before (flat
// efficiencies) and after (the presets' achievable-speed model), logs the
// table docs/model.md shows (go test -run TestPublishedMeasurements -v),
// and bounds the median absolute error of the step.
func TestPublishedMeasurements(t *testing.T) {
	cases := readCases[publishedCase](t, publishedFile)
	errs := map[string]map[string][]float64{"before": {}, "after": {}}
	var b strings.Builder
	fmt.Fprintln(&b, "| case | set | measured step (ms) | before (ms) | error | after (ms) | error |")
	fmt.Fprintln(&b, "|---|---|---|---|---|---|---|")
	for _, c := range cases {
		if c.Set != "fit" && c.Set != "held-out" {
			t.Fatalf("%s: set %q, want fit or held-out", c.Name, c.Set)
		}
		if c.Source == "" || c.SamplesPerS <= 0 || c.Batch <= 0 || len(c.Shape) == 0 || c.Shape[0] != int64(c.Batch) {
			t.Fatalf("%s: incomplete case %+v", c.Name, c)
		}
		measured := float64(c.Batch) / c.SamplesPerS * 1000
		before := predictStep(t, c, flatEfficiency)
		after := predictStep(t, c, "")
		eb, ea := (before-measured)/measured, (after-measured)/measured
		set := c.Set
		if c.DispatchBound {
			set += " (dispatch-bound, not in medians)"
		} else {
			errs["before"][c.Set] = append(errs["before"][c.Set], math.Abs(eb))
			errs["after"][c.Set] = append(errs["after"][c.Set], math.Abs(ea))
		}
		fmt.Fprintf(&b, "| %s | %s | %.1f | %.1f | %+.1f%% | %.1f | %+.1f%% |\n", c.Name, set, measured, before, 100*eb, after, 100*ea)
	}
	for _, set := range []string{"fit", "held-out"} {
		fmt.Fprintf(&b, "| **median abs error, %s** (%d cases) | | | | %.1f%% | | %.1f%% |\n",
			set, len(errs["after"][set]), 100*median(errs["before"][set]), 100*median(errs["after"][set]))
	}
	t.Log("\n" + b.String())
	if m := median(errs["after"]["held-out"]); m > heldOutMedianLimit {
		t.Errorf("held-out median abs error %.1f%%, limit %.0f%%", 100*m, 100*heldOutMedianLimit)
	}
	if m := median(errs["after"]["fit"]); m > fitMedianLimit {
		t.Errorf("fitting-set median abs error %.1f%%, limit %.0f%%", 100*m, 100*fitMedianLimit)
	}
	if a, b := median(errs["after"]["held-out"]), median(errs["before"]["held-out"]); a >= b {
		t.Errorf("held out, the achievable-speed model (%.1f%%) is no better than flat efficiencies (%.1f%%)", 100*a, 100*b)
	}
}
