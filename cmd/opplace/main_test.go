package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/opplace/opplace/plan"
	"github.com/opplace/opplace/view"
)

const (
	modelDir   = "../../testdata/models"
	clusterDir = "../../testdata/clusters"
)

// invoke runs one command line in-process.
func invoke(t *testing.T, args ...string) (code int, stdout, stderr string) {
	t.Helper()
	var out, errb bytes.Buffer
	code = run(args, &out, &errb)
	return code, out.String(), errb.String()
}

var planModels = []struct {
	name  string
	nodes int
	flags []string
}{
	{"resnet50", 169, nil},
	{"inception_v3", 316, nil},
	{"vgg16", 48, nil},
	{"mobilenet_v2", 209, nil},
	{"bert_base", 1086, []string{"--dim", "batch=16"}},
}

var clusters = []struct {
	name    string
	devices int
}{{"4xV100", 4}, {"8xA100-2host", 8}, {"hetero", 5}}

func TestPlanRealModels(t *testing.T) {
	for _, mode := range []string{"infer", "train"} {
		for _, m := range planModels {
			for _, c := range clusters {
				t.Run(mode+"/"+m.name+"/"+c.name, func(t *testing.T) {
					dir := t.TempDir()
					dotFile := filepath.Join(dir, "plan.dot")
					args := append([]string{"plan", filepath.Join(modelDir, m.name+".onnx"), "--mode", mode,
						"--cluster", filepath.Join(clusterDir, c.name+".yaml"), "--dot", dotFile, "-o", "json"}, m.flags...)
					code, stdout, stderr := invoke(t, args...)
					if code != 0 {
						t.Fatalf("exit %d: %s", code, stderr)
					}
					var p plan.Plan
					if err := json.Unmarshal([]byte(stdout), &p); err != nil {
						t.Fatalf("plan is not JSON: %v", err)
					}
					checkPlan(t, &p, m.nodes, c.devices)
					if p.Mode != mode {
						t.Errorf("plan mode %q, want %q", p.Mode, mode)
					}
					checkDOT(t, dotFile)
				})
			}
		}
	}
}

func checkPlan(t *testing.T, p *plan.Plan, nodes, devices int) {
	t.Helper()
	// Every ONNX node is a forward op; a training step adds backward and
	// update ops, each colocated with the forward op it belongs to.
	forward := 0
	for _, op := range p.Ops {
		if op.Phase == "forward" {
			forward++
		}
	}
	if forward != nodes || p.Mode == "infer" && len(p.Ops) != nodes || p.Mode == "train" && len(p.Ops) <= nodes {
		t.Errorf("%s plan has %d ops, %d forward; the model has %d nodes", p.Mode, len(p.Ops), forward, nodes)
	}
	if len(p.Devices) != devices {
		t.Fatalf("plan has %d devices, want %d", len(p.Devices), devices)
	}
	known := map[string]bool{}
	for _, d := range p.Devices {
		known[d.Name] = true
		if d.PeakMemoryBytes > d.MemoryBytes {
			t.Errorf("device %s peaks at %d B over its %d B", d.Name, d.PeakMemoryBytes, d.MemoryBytes)
		}
	}
	names := map[string]bool{}
	for _, op := range p.Ops {
		if !known[op.Device] {
			t.Fatalf("op %q placed on unknown device %q", op.Name, op.Device)
		}
		if op.Name == "" || names[op.Name] {
			t.Fatalf("op name %q is empty or repeated", op.Name)
		}
		names[op.Name] = true
		if op.EndMS < op.StartMS || op.EndMS > p.PredictedStepMS+1e-6 {
			t.Errorf("op %q runs %g..%g outside the %g ms step", op.Name, op.StartMS, op.EndMS, p.PredictedStepMS)
		}
	}
	for _, tr := range p.Transfers {
		if !known[tr.From] || !known[tr.To] || tr.From == tr.To || tr.Bytes < 0 {
			t.Errorf("bad transfer %+v", tr)
		}
	}
	if !p.Fits {
		t.Error("plan does not fit")
	}
	if p.LowerBoundMS <= 0 || p.PredictedStepMS < p.LowerBoundMS-1e-6 {
		t.Errorf("predicted %g ms is below the lower bound %g ms", p.PredictedStepMS, p.LowerBoundMS)
	}
}

// blockNode matches a block of the module view.
var blockNode = regexp.MustCompile(`(?m)^\s+"b\d+" \[`)

// checkDOT checks the default view stays small whatever the model's
// size and renders it with Graphviz (CI installs it; a developer machine
// may not have it) within seconds.
func checkDOT(t *testing.T, path string) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	blocks := len(blockNode.FindAll(data, -1))
	if !bytes.HasPrefix(data, []byte("digraph ")) || blocks <= 0 || blocks > view.DefaultMaxBlocks {
		t.Fatalf("module view draws %d blocks, want 1..%d", blocks, view.DefaultMaxBlocks)
	}
	if _, err := exec.LookPath("dot"); err != nil {
		if os.Getenv("CI") != "" {
			t.Fatal("graphviz is not installed in CI: `make setup` should install it")
		}
		t.Skip("graphviz not installed")
	}
	// A view Graphviz cannot lay out in 10 s is a bug of the view.
	svg, err := view.Render(context.Background(), data, "svg", 10*time.Second)
	if err != nil || !bytes.Contains(svg, []byte("<svg")) {
		t.Fatalf("rendering the view: %v", err)
	}
}

func TestPlanIsDeterministic(t *testing.T) {
	args := []string{"plan", filepath.Join(modelDir, "inception_v3.onnx"), "--cluster", filepath.Join(clusterDir, "8xA100-2host.yaml"), "-o", "json"}
	_, first, _ := invoke(t, args...)
	for i := 0; i < 3; i++ {
		if _, again, _ := invoke(t, args...); again != first {
			t.Fatal("two runs on the same input gave different plans")
		}
	}
}

func TestPlanFormatsAndFiles(t *testing.T) {
	dir := t.TempDir()
	model := filepath.Join(modelDir, "resnet50.onnx")
	cl := filepath.Join(clusterDir, "4xV100.yaml")

	code, stdout, stderr := invoke(t, "plan", model, "--cluster", cl, "--out", filepath.Join(dir, "p.yaml"))
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	for _, want := range []string{"predicted", "lower bound", "DEVICE", "gpu0", "PEAK MEMORY"} {
		if !strings.Contains(stdout, want) {
			t.Errorf("table on stdout lacks %q:\n%s", want, stdout)
		}
	}
	y, err := os.ReadFile(filepath.Join(dir, "p.yaml"))
	if err != nil || !bytes.Contains(y, []byte("predicted_step_ms:")) || !bytes.Contains(y, []byte("transfers:")) {
		t.Errorf("YAML plan file wrong: %v\n%.300s", err, y)
	}
	if code, stdout, _ := invoke(t, "plan", model, "--cluster", cl, "-o", "yaml"); code != 0 || !strings.HasPrefix(stdout, "model: ") {
		t.Errorf("-o yaml gave exit %d:\n%.200s", code, stdout)
	}
	for _, strategy := range []string{"single", "m-etf"} {
		code, stdout, stderr := invoke(t, "plan", model, "--cluster", cl, "--strategy", strategy)
		var p plan.Plan
		if code != 0 || json.Unmarshal([]byte(stdout), &p) != nil || p.Strategy != strategy {
			t.Errorf("--strategy %s: exit %d, strategy %q: %s", strategy, code, p.Strategy, stderr)
		}
	}
}

func TestPlanBadInput(t *testing.T) {
	dir := t.TempDir()
	write := func(name string, data []byte) string {
		p := filepath.Join(dir, name)
		if err := os.WriteFile(p, data, 0o644); err != nil {
			t.Fatal(err)
		}
		return p
	}
	real, err := os.ReadFile(filepath.Join(modelDir, "resnet50.onnx"))
	if err != nil {
		t.Fatal(err)
	}
	png := append([]byte("\x89PNG\r\n\x1a\n\x00\x00\x00\rIHDR"), bytes.Repeat([]byte{0xff, 0x00, 0x13}, 200)...)
	goodModel := filepath.Join(modelDir, "resnet50.onnx")
	goodCluster := filepath.Join(clusterDir, "4xV100.yaml")
	tiny := write("tiny.yaml", []byte("name: tiny\ndevices:\n  - {name: gpu0, type: V100-16GB, memory: 16MiB}\n  - {name: gpu1, type: V100-16GB, memory: 16MiB}\n"))

	tests := []struct {
		name    string
		args    []string
		code    int
		message string // a substring of the one-line error
	}{
		{"missing model", []string{"plan", filepath.Join(dir, "nope.onnx"), "--cluster", goodCluster}, 2, "nope.onnx"},
		{"directory", []string{"plan", dir, "--cluster", goodCluster}, 2, "directory"},
		{"empty file", []string{"plan", write("empty.onnx", nil), "--cluster", goodCluster}, 2, "empty.onnx"},
		{"PNG renamed .onnx", []string{"plan", write("pic.onnx", png), "--cluster", goodCluster}, 2, "pic.onnx"},
		{"truncated ONNX", []string{"plan", write("half.onnx", real[:len(real)/2]), "--cluster", goodCluster}, 2, "half.onnx"},
		{"unbound dimension", []string{"plan", filepath.Join(modelDir, "bert_base.onnx"), "--cluster", goodCluster}, 2, "--dim batch="},
		{"missing cluster file", []string{"plan", goodModel, "--cluster", filepath.Join(dir, "none.yaml")}, 2, "none.yaml"},
		{"cluster with unknown key", []string{"plan", goodModel, "--cluster", write("bad.yaml", []byte("name: x\ndevices:\n  - {name: g, type: T4, memroy: 1GiB}\n"))}, 2, "memroy"},
		{"no cluster flag", []string{"plan", goodModel}, 2, "cluster"},
		{"bad --dim", []string{"plan", goodModel, "--cluster", goodCluster, "--dim", "batch"}, 2, "NAME=VALUE"},
		{"bad -o", []string{"plan", goodModel, "--cluster", goodCluster, "-o", "xml"}, 2, "xml"},
		{"unknown strategy", []string{"plan", goodModel, "--cluster", goodCluster, "--strategy", "magic"}, 2, "magic"},
		{"unknown precision", []string{"plan", goodModel, "--cluster", goodCluster, "--precision", "bf16"}, 2, "fp32, tf32, amp-bf16, amp-fp16"},
		{"amp-bf16 on V100", []string{"plan", goodModel, "--cluster", goodCluster, "--precision", "amp-bf16"}, 2, "use amp-fp16"},
		{"model too big for the cluster", []string{"plan", goodModel, "--cluster", tiny}, 3, "does not fit"},
		{"too big, single strategy", []string{"plan", goodModel, "--cluster", tiny, "--strategy", "single"}, 3, "needs at least"},
	}
	for _, tc := range tests {
		t.Run(tc.name, func(t *testing.T) {
			out := filepath.Join(dir, "out-"+strings.ReplaceAll(tc.name, " ", "_")+".json")
			code, stdout, stderr := invoke(t, append(tc.args, "--out", out)...)
			if code != tc.code {
				t.Fatalf("exit %d, want %d; stderr: %s", code, tc.code, stderr)
			}
			if !strings.Contains(stderr, tc.message) {
				t.Errorf("error %q does not mention %q", stderr, tc.message)
			}
			if n := strings.Count(strings.TrimSpace(stderr), "\n"); n != 0 {
				t.Errorf("error spans %d lines, want one:\n%s", n+1, stderr)
			}
			if strings.Contains(stderr, "panic") || stdout != "" {
				t.Errorf("stdout %q, stderr %q", stdout, stderr)
			}
			if _, err := os.Stat(out); !os.IsNotExist(err) {
				t.Errorf("a failed run left %s behind", out)
			}
		})
	}
}

func TestFailedRunKeepsOldPlan(t *testing.T) {
	dir := t.TempDir()
	out := filepath.Join(dir, "plan.json")
	if err := os.WriteFile(out, []byte("previous"), 0o644); err != nil {
		t.Fatal(err)
	}
	code, _, _ := invoke(t, "plan", filepath.Join(modelDir, "bert_base.onnx"), "--cluster", filepath.Join(clusterDir, "4xV100.yaml"), "--out", out)
	if code != 2 {
		t.Fatalf("exit %d, want 2", code)
	}
	if data, _ := os.ReadFile(out); string(data) != "previous" {
		t.Errorf("failed run changed the existing plan file to %q", data)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Errorf("failed run left temporary files: %v", entries)
	}
}

// TestPlanNotes: what the chosen strategy reports about how it found the
// plan (here m-sct's LP, its size and solve time) is printed with the
// table, and left out of the plan file, which stays byte-identical.
func TestPlanNotes(t *testing.T) {
	args := []string{"plan", filepath.Join(modelDir, "resnet50.onnx"), "--cluster", filepath.Join(clusterDir, "4xV100.yaml"), "--strategy", "m-sct"}
	code, table, stderr := invoke(t, append(args, "-o", "table")...)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	if !strings.Contains(table, "note: m-sct: LP on ") || !strings.Contains(table, "solved by Clp in") {
		t.Errorf("the table has no note of m-sct's LP:\n%s", table)
	}
	code, js, stderr := invoke(t, append(args, "-o", "json")...)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	if strings.Contains(js, "Clp") || strings.Contains(js, "notes") {
		t.Errorf("the plan file carries the notes:\n%.2000s", js)
	}
}
