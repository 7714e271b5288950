package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/opplace/opplace/cluster"
	"github.com/opplace/opplace/internal/ort"
	"github.com/opplace/opplace/onnx"
	"github.com/opplace/opplace/profile"
)

// TestProfileONNXRuntime runs a small-input ResNet-50 in ONNX Runtime
// through the command. Without the library it skips, unless
// OPPLACE_REQUIRE_ONNXRUNTIME=1 (CI) makes that a failure.
func TestProfileONNXRuntime(t *testing.T) {
	if _, err := ort.Find(""); err != nil {
		if os.Getenv("OPPLACE_REQUIRE_ONNXRUNTIME") == "1" {
			t.Fatal(err)
		}
		t.Skip(err)
	}
	dir := t.TempDir()
	prof, cl := filepath.Join(dir, "p.json"), filepath.Join(dir, "cpu.yaml")
	trace, opt := filepath.Join(dir, "trace.json"), filepath.Join(dir, "opt.onnx")
	model := filepath.Join(modelDir, "resnet50.onnx")
	code, stdout, stderr := invoke(t, "profile", model, "--shape", "input.1=1,3,32,32", "--runtime", "onnxruntime", "--threads", "2",
		"--runs", "3", "--warmup", "1", "--out", prof, "--cluster-out", cl, "--keep-trace", trace, "--keep-optimized", opt)
	if code != 0 {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	for _, want := range []string{"in ONNX Runtime 1.", "intra-op threads: 2", "peak at threads 2 ", "trace (onnxruntime): "} {
		if !strings.Contains(stdout, want) {
			t.Errorf("summary lacks %q:\n%s", want, stdout)
		}
	}
	p, err := profile.Load(prof)
	if err != nil {
		t.Fatal(err)
	}
	r := p.Runtime
	if r == nil || r.Name != "onnxruntime" || r.Version == "" || r.Threads != 2 || r.Runs != 3 || !(r.ModelMedianMS > 0) ||
		r.ModelP10MS > r.ModelMedianMS || r.ModelMedianMS > r.ModelP90MS {
		t.Errorf("runtime %+v", r)
	}
	if p.Source != profile.SourceORT || len(p.Ops) == 0 {
		t.Errorf("source %q, %d ops", p.Source, len(p.Ops))
	}
	dt := p.DeviceType("local-cpu")
	if dt == nil || !(dt.PeakFLOPS > 0) || !(dt.MemoryBandwidth > 0) || !strings.Contains(dt.Description, "ONNX Runtime") {
		t.Errorf("device type %+v", dt)
	}
	var events []map[string]any
	if data, err := os.ReadFile(trace); err != nil || json.Unmarshal(data, &events) != nil || len(events) == 0 {
		t.Errorf("--keep-trace: %v", err)
	}
	if data, err := os.ReadFile(opt); err != nil {
		t.Error(err)
	} else if _, err := onnx.Decode(data, "opt.onnx", onnx.Options{}); err != nil {
		t.Errorf("--keep-optimized: %v", err)
	}
	c, err := cluster.Load(cl)
	if err != nil {
		t.Fatalf("cluster-out: %v", err)
	}
	if c.Devices[0].Type.Name != "local-cpu" {
		t.Errorf("cluster device type %q", c.Devices[0].Type.Name)
	}
	if data, _ := os.ReadFile(cl); !strings.Contains(string(data), "# Source: ONNX Runtime 1.") {
		t.Errorf("cluster file does not say its source:\n%s", data)
	}
}

func TestProfileONNXRuntimeUsage(t *testing.T) {
	model := filepath.Join(modelDir, "resnet50.onnx")
	for _, tc := range []struct {
		args []string
		want string
	}{
		{[]string{"--runtime", "tvm"}, `--runtime "tvm": want gorgonia or onnxruntime`},
		{[]string{"--keep-trace", "t.json"}, "need --runtime onnxruntime"},
		{[]string{"--runtime", "onnxruntime", "--threads", "-1"}, "--threads non-negative"},
		{[]string{"--runtime", "onnxruntime", "--import", "x.json", "--device-type", "V100-16GB"}, "excludes --import and --from"},
		{[]string{"--runtime", "onnxruntime", "--onnxruntime-lib", "/nonexistent/libonnxruntime.so"}, "npm install onnxruntime-node@1.30.0"},
	} {
		t.Run(strings.Join(tc.args, " "), func(t *testing.T) {
			code, _, stderr := invoke(t, append([]string{"profile", model, "--shape", "input.1=1,3,32,32"}, tc.args...)...)
			if code != 2 || !strings.Contains(stderr, tc.want) {
				t.Errorf("exit %d, stderr %q; want exit 2 and %q", code, stderr, tc.want)
			}
		})
	}
}
