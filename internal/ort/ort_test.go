package ort

import (
	"context"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/opplace/opplace/onnx"
	"github.com/opplace/opplace/onnx/onnxpb"
	"google.golang.org/protobuf/proto"
)

// library returns the ONNX Runtime library, skipping the test when there
// is none unless OPPLACE_REQUIRE_ONNXRUNTIME=1 (CI) makes that a failure.
func library(t *testing.T) string {
	t.Helper()
	lib, err := Find("")
	if err != nil {
		if os.Getenv("OPPLACE_REQUIRE_ONNXRUNTIME") == "1" {
			t.Fatal(err)
		}
		t.Skip(err)
	}
	return lib
}

func TestRunTiny(t *testing.T) {
	lib := library(t)
	for _, tc := range []struct {
		name  string
		model []byte
		want  []int64
	}{
		{"matmul", matMulModel(64), []int64{64, 64}},
		{"add", addModel(1000), []int64{1000}},
		{"chain", chainModel(3), []int64{1}},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res, err := Run(context.Background(), tc.model, Options{Library: lib, Runs: 3})
			if err != nil {
				t.Fatal(err)
			}
			if len(res.Outputs) != 1 || !slices.Equal(res.Outputs[0].Shape, tc.want) {
				t.Errorf("outputs %v, want one of shape %v", res.Outputs, tc.want)
			}
			if len(res.TimesMS) != 3 || !(res.MedianMS > 0) || res.P10MS > res.MedianMS || res.MedianMS > res.P90MS {
				t.Errorf("times %v: median %g p10 %g p90 %g", res.TimesMS, res.MedianMS, res.P10MS, res.P90MS)
			}
			if res.Version == "" || res.Library != lib || res.Threads != 1 {
				t.Errorf("version %q library %q threads %d", res.Version, res.Library, res.Threads)
			}
			if res.Trace != nil || res.Optimized != nil {
				t.Error("trace or optimized model without asking")
			}
		})
	}
}

func TestRunProfile(t *testing.T) {
	lib := library(t)
	const runs = 4
	res, err := Run(context.Background(), chainModel(5), Options{Library: lib, Warmup: 2, Runs: runs, Profile: true, KeepOptimized: true, Threads: 2})
	if err != nil {
		t.Fatal(err)
	}
	if res.Threads != 2 {
		t.Errorf("threads %d, want 2", res.Threads)
	}
	var events []struct {
		Cat  string `json:"cat"`
		Name string `json:"name"`
	}
	if err := json.Unmarshal(res.Trace, &events); err != nil {
		t.Fatalf("trace: %v", err)
	}
	kernels := map[string]int{}
	modelRuns := 0
	for _, e := range events {
		if e.Cat == "Node" && strings.HasSuffix(e.Name, "_kernel_time") {
			kernels[strings.TrimSuffix(e.Name, "_kernel_time")]++
		}
		if e.Name == "model_run" {
			modelRuns++
		}
	}
	// Only the timed runs: each node once per run.
	if modelRuns != runs || len(kernels) != 5 || kernels["add0"] != runs {
		t.Errorf("trace has %d model runs and kernel events %v; want %d runs of 5 nodes", modelRuns, kernels, runs)
	}
	mp := &onnxpb.ModelProto{}
	if err := proto.Unmarshal(res.Optimized, mp); err != nil || len(mp.GetGraph().GetNode()) == 0 {
		t.Errorf("optimized model: %v", err)
	}
}

func TestRunErrors(t *testing.T) {
	lib := library(t)
	bad := &onnxpb.ModelProto{}
	_ = proto.Unmarshal(matMulModel(4), bad)
	bad.Graph.Node[0].OpType = proto.String("NoSuchOp")
	badData, _ := proto.Marshal(bad)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	for _, tc := range []struct {
		name  string
		ctx   context.Context
		model []byte
		check func(error) bool
	}{
		{"unknown op", context.Background(), badData, func(err error) bool {
			var re *RunError
			return errors.As(err, &re) && re.Stage == "load" && strings.Contains(err.Error(), "NoSuchOp")
		}},
		{"cancelled", ctx, matMulModel(4), func(err error) bool { return errors.Is(err, context.Canceled) }},
		{"not a model", context.Background(), []byte("nope"), func(err error) bool { return strings.Contains(err.Error(), "not an ONNX model") }},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Run(tc.ctx, tc.model, Options{Library: lib})
			if err == nil || !tc.check(err) {
				t.Fatalf("err = %v", err)
			}
		})
	}
}

// TestRunResNet50 runs a shared model, its weights filled by
// onnx.Runnable, at batch 1.
func TestRunResNet50(t *testing.T) {
	lib := library(t)
	data, err := os.ReadFile(filepath.Join("..", "..", "testdata", "models", "resnet50.onnx"))
	if err != nil {
		t.Skip(err)
	}
	model, err := onnx.Runnable(data, onnx.RunnableOptions{Options: onnx.Options{Shapes: map[string][]int64{"input.1": {1, 3, 224, 224}}}})
	if err != nil {
		t.Fatal(err)
	}
	res, err := Run(context.Background(), model, Options{Library: lib, Warmup: 1, Runs: 3, Profile: true})
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Outputs) != 1 || !slices.Equal(res.Outputs[0].Shape, []int64{1, 1000}) {
		t.Errorf("outputs %v, want [1 1000]", res.Outputs)
	}
	if !strings.Contains(string(res.Trace), "_kernel_time") {
		t.Error("no kernel events in the trace")
	}
	t.Logf("ResNet-50 batch 1, 1 thread: median %.1f ms (%v)", res.MedianMS, res.TimesMS)
}

func TestMeasurePeak(t *testing.T) {
	lib := library(t)
	old, oldB, oldT := peakSizes, bandwidthElems, peakRoundTime
	peakSizes, bandwidthElems, peakRoundTime = []int{128}, 1<<16, 0
	defer func() { peakSizes, bandwidthElems, peakRoundTime = old, oldB, oldT }()
	p, err := MeasurePeak(context.Background(), Options{Library: lib, Warmup: 1, Runs: 5})
	if err != nil {
		t.Fatal(err)
	}
	for name, f := range map[string]Figure{"flops": p.FLOPS, "bandwidth": p.Bandwidth, "overhead": p.Overhead} {
		if !(f.Median > 0) || f.P10 > f.Median || f.Median > f.P90 || (name != "overhead" && f.Best < f.P90) || (name == "overhead" && f.Best > f.P10) {
			t.Errorf("%s: %+v", name, f)
		}
	}
	if p.MatMulN != 128 || p.Threads != 1 || p.Version == "" || p.Rounds < DefaultSettle.MinRounds || p.Rounds > DefaultSettle.MaxRounds ||
		p.Runs != 3*p.Rounds*5 || len(p.RoundFLOPS) != p.Rounds {
		t.Errorf("%+v", p)
	}
	// Settled means the best FLOP/s came back in enough rounds.
	if n := confirmed(p.RoundFLOPS, DefaultSettle.Tolerance); p.Settled && n < DefaultSettle.Confirm {
		t.Errorf("%+v", p)
	}
	// A fixed count runs exactly that many rounds, settled or not.
	p, err = MeasurePeakWith(context.Background(), Options{Library: lib, Warmup: 1, Runs: 2}, FixedRounds(2))
	if err != nil {
		t.Fatal(err)
	}
	if p.Rounds != 2 || p.Runs != 3*2*2 || len(p.RoundFLOPS) != 2 || p.RoundSpread() < 0 || p.RoundSpread() >= 1 {
		t.Errorf("fixed rounds: %+v", p)
	}
}

func TestConfirmed(t *testing.T) {
	for _, c := range []struct {
		v    []float64
		tol  float64
		want int
	}{
		{nil, 0.03, 0},
		{[]float64{100}, 0.03, 1},
		{[]float64{100, 97.5, 96.9, 50}, 0.03, 2},
		{[]float64{60, 100, 99, 98, 97}, 0.03, 4},
		{[]float64{100, 100, 100}, 0, 3},
	} {
		if got := confirmed(c.v, c.tol); got != c.want {
			t.Errorf("confirmed(%v, %g) = %d, want %d", c.v, c.tol, got, c.want)
		}
	}
}

func TestFind(t *testing.T) {
	dir := t.TempDir()
	lib := filepath.Join(dir, "libonnxruntime.so.1")
	if err := os.WriteFile(lib, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv(EnvLibrary, "")
	if got, err := Find(lib); err != nil || got != lib {
		t.Errorf("Find(explicit) = %q, %v", got, err)
	}
	_, err := Find(filepath.Join(dir, "missing.so"))
	var nf *NotFoundError
	if !errors.As(err, &nf) || !strings.Contains(err.Error(), "npm install onnxruntime-node@1.30.0") || !strings.Contains(err.Error(), EnvLibrary) {
		t.Errorf("missing explicit: %v", err)
	}
	t.Setenv(EnvLibrary, lib)
	if got, err := Find(""); err != nil || got != lib {
		t.Errorf("Find from $%s = %q, %v", EnvLibrary, got, err)
	}
	t.Setenv(EnvLibrary, dir)
	if _, err := Find(""); err == nil || !strings.Contains(err.Error(), "directory") {
		t.Errorf("a directory: %v", err)
	}
	// node_modules under the working directory.
	t.Setenv(EnvLibrary, "")
	npm := filepath.Join(dir, "node_modules", "onnxruntime-node", npmDir(), libName())
	if err := os.MkdirAll(filepath.Dir(npm), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(npm, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	sub := filepath.Join(dir, "a", "b")
	os.MkdirAll(sub, 0o755)
	t.Chdir(sub)
	if got, err := Find(""); err != nil || got != npm {
		t.Errorf("Find in node_modules of a parent = %q, %v; want %q", got, err, npm)
	}
	// make setup's install: npm's prefix .cache/onnxruntime-node.
	other := t.TempDir()
	cached := filepath.Join(other, ".cache", "onnxruntime-node", "node_modules", "onnxruntime-node", npmDir(), libName())
	if err := os.MkdirAll(filepath.Dir(cached), 0o755); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(cached, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	t.Chdir(other)
	if got, err := Find(""); err != nil || got != cached {
		t.Errorf("Find in .cache = %q, %v; want %q", got, err, cached)
	}
}

func TestTimedEvents(t *testing.T) {
	trace := `[{"cat":"Session","name":"session_initialization","ts":1},
{"cat":"Node","name":"a_kernel_time","ts":10,"dur":1},{"cat":"Session","name":"model_run","ts":9,"dur":5},
{"cat":"Node","name":"a_kernel_time","ts":20,"dur":1},{"cat":"Session","name":"model_run","ts":19,"dur":5},
{"cat":"Node","name":"a_kernel_time","ts":30,"dur":2},{"cat":"Session","name":"model_run","ts":29,"dur":5}]`
	out, err := timedEvents([]byte(trace), 2)
	if err != nil {
		t.Fatal(err)
	}
	var evs []map[string]any
	if err := json.Unmarshal(out, &evs); err != nil {
		t.Fatal(err)
	}
	var ts []float64
	for _, e := range evs {
		ts = append(ts, e["ts"].(float64))
	}
	if want := []float64{1, 20, 19, 30, 29}; !slices.Equal(ts, want) {
		t.Errorf("kept events at %v, want %v", ts, want)
	}
	if _, err := timedEvents([]byte(trace), 4); err == nil {
		t.Error("4 timed runs of 3 accepted")
	}
}
