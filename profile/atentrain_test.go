package profile_test

import (
	"encoding/json"
	"math"
	"slices"
	"strings"
	"testing"

	"github.com/opplace/opplace/graph"
	"github.com/opplace/opplace/internal/kinetotest"
	"github.com/opplace/opplace/onnx"
	"github.com/opplace/opplace/profile"
	"github.com/opplace/opplace/train"
)

// a100 is the A100-80GB preset's roofline as opplace profile --import
// --device-type A100-80GB builds it (float32 peak).
var a100 = profile.DeviceType{Name: "A100-80GB", PeakFLOPS: 19.5e12, MemoryBandwidth: 2039e9, LaunchOverhead: 5e-6}

// knownGPU are the constants the test traces' kernel times come from:
// conv and matmul at most 45% of the float32 peak, half of that at 2
// GFLOP, other kernels at 72% of the bandwidth plus 4 µs.
var knownGPU = kinetotest.Constants{
	PeakFLOPS: a100.PeakFLOPS, Bandwidth: a100.MemoryBandwidth,
	ComputeEff: 0.45, ComputeHalf: 2e9, ComputeOverhead: a100.LaunchOverhead,
	MemoryEff: 0.72, MemoryOverhead: 4e-6,
}

// resnet18Train is torchvision's ResNet-18 (the held-out export) at
// batch 16 and its training step with Adam.
func resnet18Train(t testing.TB) (fwd, tg *graph.Graph) {
	t.Helper()
	m, err := onnx.Load("../testdata/models/heldout/resnet18.onnx", onnx.Options{Shapes: map[string][]int64{"input.1": {16, 3, 224, 224}}})
	if err != nil {
		t.Fatal(err)
	}
	tg, _, err = train.Build(m.Graph, train.Options{Optimizer: train.Adam})
	if err != nil {
		t.Fatal(err)
	}
	return m.Graph, tg
}

// A training step's trace in Kineto's format maps onto the training
// graph: every op's measured time is the time the trace gave its
// kernels, and the share matched is all but the loss's.
func TestImportTrainingStep(t *testing.T) {
	fwd, tg := resnet18Train(t)
	tr, err := kinetotest.TrainingStep(fwd, tg, knownGPU, 2)
	if err != nil {
		t.Fatal(err)
	}
	res, err := profile.ImportWith("step.json", tr.JSON, fwd, a100, profile.ImportOptions{})
	if err != nil {
		t.Fatal(err)
	}
	if res.Graph == nil || res.Optimizer != "adam" || res.Runs != 2 {
		t.Fatalf("training graph %v, optimizer %q, runs %d; want the training step, adam, 2 runs", res.Graph != nil, res.Optimizer, res.Runs)
	}
	wantShare := 1 - tr.LossUS/tr.StepUS
	if math.Abs(res.TraceMS-tr.StepUS/1e3) > 1e-5 || math.Abs(res.MatchedShare-wantShare) > 1e-6 {
		t.Errorf("trace %.6f ms, share %.6f; want %.6f ms, %.6f", res.TraceMS, res.MatchedShare, tr.StepUS/1e3, wantShare)
	}
	if res.Unmeasured != 0 {
		t.Errorf("%d kernel-launching ops of the training step have no time", res.Unmeasured)
	}
	got := map[string]float64{}
	for _, m := range res.Profile.Ops {
		got[m.Name] = m.MedianMS * 1e3
	}
	if len(got) != len(tr.OpUS) {
		t.Errorf("%d ops have a time, the trace timed %d", len(got), len(tr.OpUS))
	}
	for name, us := range tr.OpUS {
		if math.Abs(got[name]-us) > 1e-3+1e-6*us {
			t.Errorf("op %s: measured %.4f us, the trace gave it %.4f us", name, got[name], us)
		}
	}
	var phases float64
	for _, p := range res.Phases {
		phases += p.MS
	}
	if len(res.Phases) != 3 || math.Abs(phases-res.TraceMS) > 1e-5 {
		t.Errorf("phases %+v do not sum to the trace's %.6f ms", res.Phases, res.TraceMS)
	}
}

// Calibrating on the imported training step recovers the constants the
// kernel times were made from: exactly without noise, within the noise's
// reach with it.
func TestCalibrateTrainingStepRecovers(t *testing.T) {
	fwd, tg := resnet18Train(t)
	for _, tc := range []struct {
		name  string
		noise float64
		tol   float64 // relative
	}{
		{"exact", 0, 0.01},
		{"noise 10%", 0.1, 0.15},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := knownGPU
			c.Noise, c.Seed = tc.noise, 7
			tr, err := kinetotest.TrainingStep(fwd, tg, c, 1)
			if err != nil {
				t.Fatal(err)
			}
			res, err := profile.ImportWith("step.json", tr.JSON, fwd, a100, profile.ImportOptions{})
			if err != nil {
				t.Fatal(err)
			}
			cal, err := profile.Calibrate(res.Profile, res.Graph, a100.Name)
			if err != nil {
				t.Fatal(err)
			}
			conv, elem, upd := cal.Fit(profile.FamilyConv), cal.Fit(profile.FamilyElementwise), cal.Fit(profile.FamilyUpdate)
			t.Logf("conv %+v\nelementwise %+v\nupdate %+v\nerror %+v -> %+v", *conv, *elem, *upd, cal.Before, cal.After)
			// The update ops' fit is held to 2% more: the profile keeps
			// times to 1 ns (median_ms to six decimals), and a bias's
			// Adam update takes 1-10 ns, which rounding moves by up to
			// 40%.
			for _, chk := range []struct {
				what      string
				fit, want float64
				slack     float64
			}{
				{"conv e_max", conv.ComputeEfficiency, c.ComputeEff, 0},
				{"conv W_half", conv.ComputeHalfFLOPs, c.ComputeHalf, 0},
				{"conv overhead", conv.OverheadS, c.ComputeOverhead, 0},
				{"elementwise bandwidth fraction", elem.MemoryEfficiency, c.MemoryEff, 0},
				{"elementwise overhead", elem.OverheadS, c.MemoryOverhead, 0},
				{"update bandwidth fraction", upd.MemoryEfficiency, c.MemoryEff, 0.02},
			} {
				if math.Abs(chk.fit/chk.want-1) > tc.tol+chk.slack {
					t.Errorf("%s: fitted %.4g, the trace was made with %.4g (tolerance %.0f%%)", chk.what, chk.fit, chk.want, 100*(tc.tol+chk.slack))
				}
			}
			if conv.Family != profile.FamilyConv || elem.Family != profile.FamilyElementwise || upd.Family != profile.FamilyUpdate {
				t.Errorf("families fitted on their own: conv %s, elementwise %s, update %s", conv.Family, elem.Family, upd.Family)
			}
		})
	}
}

// GPU time the map cannot place (a kernel launched outside every aten op,
// as a user's CUDA extension or a collective would be) lowers the share
// matched, and below 80% the import warns and names it.
func TestImportTrainingStepUnmappedWarns(t *testing.T) {
	fwd, tg := resnet18Train(t)
	tr, err := kinetotest.TrainingStep(fwd, tg, knownGPU, 1)
	if err != nil {
		t.Fatal(err)
	}
	var doc struct {
		TraceEvents []map[string]any `json:"traceEvents"`
	}
	if err := json.Unmarshal(tr.JSON, &doc); err != nil {
		t.Fatal(err)
	}
	var step map[string]any
	for _, e := range doc.TraceEvents {
		if name, _ := e["name"].(string); strings.HasPrefix(name, "ProfilerStep#") {
			step = e
		}
	}
	if step == nil {
		t.Fatal("the test trace has no ProfilerStep#N range")
	}
	ts := step["ts"].(float64) + 1
	for _, tc := range []struct {
		extraUS   float64 // the outside kernel's time
		wantShare float64
		warns     bool
	}{
		{0.1 * tr.StepUS, (tr.StepUS - tr.LossUS) / (1.1 * tr.StepUS), false},
		{tr.StepUS, (tr.StepUS - tr.LossUS) / (2 * tr.StepUS), true},
	} {
		// Kineto's fields: a cudaLaunchKernel on a thread of its own and
		// its kernel on a stream, one correlation id.
		evs := append(slices.Clone(doc.TraceEvents),
			map[string]any{"ph": "X", "cat": "cuda_runtime", "name": "cudaLaunchKernel", "pid": 1, "tid": 99, "ts": ts, "dur": 2.0, "args": map[string]any{"correlation": 1e6}},
			map[string]any{"ph": "X", "cat": "kernel", "name": "my_extension_kernel", "pid": 0, "tid": 7, "ts": ts + 2, "dur": tc.extraUS, "args": map[string]any{"correlation": 1e6, "stream": 7, "device": 0}})
		data, err := json.Marshal(map[string]any{"traceEvents": evs})
		if err != nil {
			t.Fatal(err)
		}
		res, err := profile.ImportWith("step.json", data, fwd, a100, profile.ImportOptions{})
		if err != nil {
			t.Fatal(err)
		}
		warned := false
		for _, w := range res.Warnings {
			warned = warned || strings.HasPrefix(w, "only ") && strings.Contains(w, "kernel time")
		}
		t.Logf("outside kernel %.3f ms: share %.4f, warnings %q", tc.extraUS/1e3, res.MatchedShare, res.Warnings)
		if math.Abs(res.MatchedShare-tc.wantShare) > 1e-4 || warned != tc.warns {
			t.Errorf("outside kernel %.3f ms: share %.4f (want %.4f), share warning %v (want %v)", tc.extraUS/1e3, res.MatchedShare, tc.wantShare, warned, tc.warns)
		}
	}
}
