package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/opplace/opplace/cluster"
	"github.com/opplace/opplace/internal/ort"
	"github.com/opplace/opplace/onnx"
	"github.com/opplace/opplace/profile"
)

// requireORT skips a test without the ONNX Runtime library, unless
// OPPLACE_REQUIRE_ONNXRUNTIME=1 (CI) makes that a failure.
func requireORT(t *testing.T) {
	t.Helper()
	if _, err := ort.Find(""); err != nil {
		if os.Getenv("OPPLACE_REQUIRE_ONNXRUNTIME") == "1" {
			t.Fatal(err)
		}
		t.Skip(err)
	}
}

// TestProfileONNXRuntime runs a small-input ResNet-50 in ONNX Runtime
// through the command. Without the library it skips, unless
// OPPLACE_REQUIRE_ONNXRUNTIME=1 (CI) makes that a failure.
func TestProfileONNXRuntime(t *testing.T) {
	requireORT(t)
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
		{[]string{"--runtime", "tvm"}, `--runtime "tvm": want auto, gorgonia or onnxruntime`},
		{[]string{"--runtime", "gorgonia", "--keep-trace", "t.json"}, "need --runtime onnxruntime"},
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

// --runtime auto measures in ONNX Runtime when the library is found, with
// gorgonia when nothing is measured, for --max-time, or when none is
// installed; a library named but missing is an error.
func TestResolveRuntime(t *testing.T) {
	found := func(string) (string, error) { return "/lib/libonnxruntime.so.1", nil }
	none := func(string) (string, error) {
		return "", &ort.NotFoundError{Tried: []string{"/usr/lib"}, Err: os.ErrNotExist}
	}
	broken := func(string) (string, error) {
		return "", &ort.NotFoundError{Explicit: "/x.so ($OPPLACE_ONNXRUNTIME)", Err: os.ErrNotExist}
	}
	for _, tc := range []struct {
		name      string
		f         profileFlags
		measuring bool
		find      func(string) (string, error)
		want      string
		fellBack  bool
		err       string
	}{
		{"found", profileFlags{runtime: runtimeAuto}, true, found, runtimeONNXRuntime, false, ""},
		{"none installed", profileFlags{runtime: runtimeAuto}, true, none, runtimeGorgonia, true, ""},
		{"named but missing", profileFlags{runtime: runtimeAuto}, true, broken, "", false, "OPPLACE_ONNXRUNTIME"},
		{"not measuring", profileFlags{runtime: runtimeAuto}, false, broken, runtimeGorgonia, false, ""},
		{"max-time", profileFlags{runtime: runtimeAuto, maxTime: time.Second}, true, found, runtimeGorgonia, false, ""},
		{"keep-trace asks for it", profileFlags{runtime: runtimeAuto, keepTrace: "t.json"}, true, none, runtimeONNXRuntime, false, ""},
		{"explicit gorgonia", profileFlags{runtime: runtimeGorgonia}, true, found, runtimeGorgonia, false, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			got, fellBack, err := resolveRuntime(&tc.f, tc.measuring, tc.find)
			if tc.err != "" {
				if err == nil || !strings.Contains(err.Error(), tc.err) {
					t.Fatalf("err %v, want one naming %q", err, tc.err)
				}
				return
			}
			if err != nil || got != tc.want || fellBack != tc.fellBack {
				t.Errorf("got %q, fell back %v, err %v; want %q, %v", got, fellBack, err, tc.want, tc.fellBack)
			}
		})
	}
}

// The default measures in ONNX Runtime where the library is installed.
func TestProfileAutoUsesONNXRuntime(t *testing.T) {
	requireORT(t)
	dir := t.TempDir()
	code, stdout, stderr := invoke(t, "profile", filepath.Join(modelDir, "resnet50.onnx"), "--shape", "input.1=1,3,32,32",
		"--runs", "2", "--warmup", "1", "--out", filepath.Join(dir, "p.json"))
	if code != 0 || !strings.Contains(stdout, "in ONNX Runtime 1.") {
		t.Errorf("exit %d, summary:\n%s%s", code, stdout, stderr)
	}
}
