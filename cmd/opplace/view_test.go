package main

import (
	"bytes"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/opplace/opplace/plan"
)

// TestPlanTrace checks the trace of a real pipeline plan against the plan
// document written beside it: every op run once per micro-batch with the
// plan's times, every copy once, memory for every busy device.
func TestPlanTrace(t *testing.T) {
	dir := t.TempDir()
	planFile, traceFile := filepath.Join(dir, "plan.json"), filepath.Join(dir, "trace.json")
	code, _, stderr := invoke(t, "plan", filepath.Join(modelDir, "gpt2_small.onnx"), "--cluster", filepath.Join(clusterDir, "8xA100-2host.yaml"),
		"--dim", "batch=16", "--strategy", "pipeline", "--microbatches", "4", "--out", planFile, "--trace", traceFile)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	var p plan.Plan
	data, _ := os.ReadFile(planFile)
	if err := json.Unmarshal(data, &p); err != nil {
		t.Fatal(err)
	}
	if p.MicroBatches != 4 || len(p.Stages) < 2 {
		t.Fatalf("want a pipeline of 4 micro-batches, got %d stages, %d micro-batches", len(p.Stages), p.MicroBatches)
	}
	var doc struct {
		TraceEvents []struct {
			Name, Cat, Ph string
			TS, Dur       float64
			PID           int
			Args          map[string]any
		} `json:"traceEvents"`
	}
	data, _ = os.ReadFile(traceFile)
	if err := json.Unmarshal(data, &doc); err != nil {
		t.Fatalf("trace is not JSON: %v", err)
	}
	type run struct {
		name string
		mb   int
	}
	want := map[run][2]float64{}
	for _, op := range p.Ops {
		if len(op.Runs) == 0 {
			want[run{op.Name, 0}] = [2]float64{op.StartMS, op.EndMS}
		}
		for _, r := range op.Runs {
			want[run{op.Name, r.MicroBatch}] = [2]float64{r.StartMS, r.EndMS}
		}
	}
	got := map[run][2]float64{}
	copies, memory, bubbles := 0, 0, 0
	for _, e := range doc.TraceEvents {
		switch {
		case e.Ph == "X" && e.Cat == "bubble":
			bubbles++
		case e.Ph == "X" && e.PID == 1:
			r := run{e.Name, int(e.Args["micro_batch"].(float64))}
			if _, dup := got[r]; dup {
				t.Fatalf("%v appears twice", r)
			}
			got[r] = [2]float64{e.TS / 1000, (e.TS + e.Dur) / 1000}
		case e.Ph == "X" && e.Cat == "transfer":
			copies++
		case e.Ph == "C":
			memory++
		}
	}
	if len(got) != len(want) {
		t.Fatalf("trace has %d op runs, the plan %d", len(got), len(want))
	}
	perMB := 0
	for r, w := range want {
		g, ok := got[r]
		if !ok || abs(g[0]-w[0]) > 1e-6 || abs(g[1]-w[1]) > 1e-6 {
			t.Fatalf("run %v: trace %v, plan %v", r, g, w)
		}
		if r.mb == 3 {
			perMB++
		}
	}
	if perMB == 0 || copies != len(p.Transfers) || memory == 0 || bubbles == 0 {
		t.Errorf("%d ops with a 4th micro-batch, %d copies of %d, %d memory samples, %d bubbles", perMB, copies, len(p.Transfers), memory, bubbles)
	}
}

func abs(x float64) float64 {
	if x < 0 {
		return -x
	}
	return x
}

// TestPlanPictures draws every level of a pipeline plan and renders the
// default view to SVG and PNG; an op view too large for Graphviz is
// refused with a usage error naming the filters, and no file is left.
func TestPlanPictures(t *testing.T) {
	dir := t.TempDir()
	model, cl := filepath.Join(modelDir, "gpt2_small.onnx"), filepath.Join(clusterDir, "8xA100-2host.yaml")
	base := []string{"plan", model, "--cluster", cl, "--dim", "batch=16", "--strategy", "pipeline", "-o", "table"}
	for _, detail := range []string{"device", "stage", "module"} {
		dot := filepath.Join(dir, detail+".dot")
		if code, _, stderr := invoke(t, append(base, "--dot", dot, "--dot-detail", detail)...); code != 0 {
			t.Fatalf("%s: exit %d: %s", detail, code, stderr)
		}
		data, _ := os.ReadFile(dot)
		if !bytes.Contains(data, []byte(`subgraph "cluster_stage1"`)) && detail != "stage" || detail == "stage" && !bytes.Contains(data, []byte(`"s0" -> "s1"`)) {
			t.Errorf("%s view does not draw the stages:\n%s", detail, data)
		}
	}
	out := filepath.Join(dir, "plan.json")
	code, _, stderr := invoke(t, append(base, "--out", out, "--dot", filepath.Join(dir, "ops.dot"), "--dot-detail", "op")...)
	if code != exitInvalid || !strings.Contains(stderr, "--dot-stage") {
		t.Errorf("op view of the whole model: exit %d, %s", code, stderr)
	}
	if _, err := os.Stat(out); err == nil {
		t.Error("a failed view left the plan file behind")
	}
	if code, _, stderr := invoke(t, append(base, "--dot", filepath.Join(dir, "s1.dot"), "--dot-detail", "op", "--dot-stage", "1", "--dot-module", "/blocks/blocks.3/")...); code != 0 {
		t.Errorf("op view of one stage's module: exit %d, %s", code, stderr)
	}
	if code, _, stderr := invoke(t, append(base, "--dot", filepath.Join(dir, "x.dot"), "--dot-detail", "layer")...); code != exitInvalid || !strings.Contains(stderr, "--dot-detail") {
		t.Errorf("--dot-detail layer: exit %d, %s", code, stderr)
	}
	if _, err := exec.LookPath("dot"); err != nil {
		t.Skip("graphviz not installed")
	}
	svg, png := filepath.Join(dir, "p.svg"), filepath.Join(dir, "p.png")
	if code, _, stderr := invoke(t, append(base, "--svg", svg, "--png", png)...); code != 0 {
		t.Fatalf("--svg --png: exit %d, %s", code, stderr)
	}
	if data, _ := os.ReadFile(svg); !bytes.Contains(data, []byte("<svg")) {
		t.Error("--svg wrote no SVG")
	}
	if data, _ := os.ReadFile(png); !bytes.HasPrefix(data, []byte("\x89PNG")) {
		t.Error("--png wrote no PNG")
	}
	t.Setenv("PATH", dir)
	if code, _, stderr := invoke(t, append(base, "--svg", filepath.Join(dir, "none.svg"))...); code != exitInvalid || !strings.Contains(stderr, "apt install graphviz") {
		t.Errorf("--svg without Graphviz: exit %d, %s", code, stderr)
	}
}
