package main

import (
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/opplace/opplace/plan"
)

const publishedMultiFile = "../../testdata/measured/published-multi.yaml"

// multiCase is one published pair of runs: one GPU and n GPUs of one
// type at the same per-GPU batch.
type multiCase struct {
	Name        string  `yaml:"name"`
	Model       string  `yaml:"model"`
	PerGPUBatch int     `yaml:"per_gpu_batch"`
	Device      string  `yaml:"device"`
	GPUs        int     `yaml:"gpus"`
	LinkGBps    float64 `yaml:"link_gbps"`
	Precision   string  `yaml:"precision"`
	One         float64 `yaml:"samples_per_s_1"`
	N           float64 `yaml:"samples_per_s_n"`
	Source      string  `yaml:"source"`
}

// predictMulti plans the case on n devices (single on one, data parallel
// on more) and returns the predicted throughput in samples/s.
func predictMulti(t *testing.T, c multiCase, n int) float64 {
	t.Helper()
	src := fmt.Sprintf("name: %s-%d\nhosts:\n  - {name: h, intra: {kind: nvlink, bandwidth: %gGB/s, latency: 2us}}\ndevices:\n  - {name: \"g{i}\", count: %d, type: %s, host: h}\n",
		c.Name, n, c.LinkGBps, n, c.Device)
	cl := filepath.Join(t.TempDir(), "c.yaml")
	if err := os.WriteFile(cl, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	batch := c.PerGPUBatch * n
	strategy := "single"
	if n > 1 {
		strategy = "dp"
	}
	args := []string{"plan", filepath.Join(modelDir, c.Model+".onnx"), "--cluster", cl, "--strategy", strategy, "--zero", "none",
		"--fusion", "none", "--optimizer", "momentum", "--shape", fmt.Sprintf("input.1=%d,3,224,224", batch), "-o", "json"}
	if c.Precision != "fp32" {
		args = append(args, "--precision", c.Precision)
	}
	code, stdout, stderr := invoke(t, args...)
	if code != 0 {
		t.Fatalf("%s on %d: exit %d: %s", c.Name, n, code, stderr)
	}
	var p plan.Plan
	if err := json.Unmarshal([]byte(stdout), &p); err != nil {
		t.Fatal(err)
	}
	return float64(batch) / p.PredictedStepMS * 1e3
}

// TestPublishedMultiGPU predicts every published 1-GPU and 8-GPU pair,
// logs the table docs/model.md shows (go test ./cmd/opplace -run
// TestPublishedMultiGPU -v), and checks that no prediction scales better
// than linearly and that the median error of predicted scaling stays
// within the measured figure (9.3% when written) with a margin.
func TestPublishedMultiGPU(t *testing.T) {
	if testing.Short() {
		t.Skip("plans twelve ResNet-50 steps")
	}
	cases := readCases[multiCase](t, publishedMultiFile)
	var b strings.Builder
	fmt.Fprintln(&b, "| case | GPUs | published 1 → N (samples/s) | scaling | predicted 1 → N | scaling | scaling error | N-GPU error |")
	fmt.Fprintln(&b, "|---|---|---|---|---|---|---|---|")
	var scaleErrs, nErrs []float64
	for _, c := range cases {
		one, n := predictMulti(t, c, 1), predictMulti(t, c, c.GPUs)
		pub, pred := c.N/c.One, n/one
		if pred > float64(c.GPUs)*(1+1e-9) {
			t.Errorf("%s: predicted scaling %.3fx on %d GPUs is super-linear", c.Name, pred, c.GPUs)
		}
		se, ne := pred/pub-1, n/c.N-1
		scaleErrs, nErrs = append(scaleErrs, math.Abs(se)), append(nErrs, math.Abs(ne))
		fmt.Fprintf(&b, "| %s | %d | %.0f → %.0f | %.2fx | %.0f → %.0f | %.2fx | %+.1f%% | %+.1f%% |\n",
			c.Name, c.GPUs, c.One, c.N, pub, one, n, pred, 100*se, 100*ne)
	}
	ms, mn := median(scaleErrs), median(nErrs)
	fmt.Fprintf(&b, "| **median abs error** (%d cases, all held out) | | | | | | %.1f%% | %.1f%% |\n", len(cases), 100*ms, 100*mn)
	t.Log("\n" + b.String())
	if ms > 0.12 {
		t.Errorf("median scaling error %.1f%%, over 12%%", 100*ms)
	}
}
